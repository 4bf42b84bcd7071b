"""The container's files without an engine: the compose file wires kg, the worker and Neo4j
with health checks to the image's own commands, the image's health check script answers for
a real `kg serve`, and the dependency list the image installs is pyproject's."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.served import Served, free_port, serve

DOCKER = Path(__file__).resolve().parents[1] / "docker"


def test_compose_runs_serve_and_worker_on_neo4j_with_health_checks() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"kg", "worker", "neo4j"}
    assert all("healthcheck" in s for s in services.values())
    kg, worker = services["kg"], services["worker"]
    assert kg["command"] == ["serve"] and worker["command"][0] == "worker"
    assert kg["healthcheck"]["test"] == ["CMD", "kg-healthcheck"]
    for s in (kg, worker):  # one shared store: the embedded one belongs to one process
        assert s["environment"]["KG_URI"] == "bolt://neo4j:7687"
        assert s["depends_on"]["neo4j"]["condition"] == "service_healthy"
    assert worker["depends_on"]["kg"]["condition"] == "service_healthy"
    containerfile = (DOCKER / "kg" / "Containerfile").read_text()
    assert 'CMD ["kg-healthcheck"]' in containerfile and "USER kg" in containerfile


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = serve(tmp_path_factory.mktemp("health") / "home", [])
    try:
        yield s
    finally:
        assert s.stop() == 0, s.log()


def healthcheck(port: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KG_PORT": str(port)}
    script = DOCKER / "kg" / "healthcheck.py"
    return subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=30
    )


def test_the_health_check_passes_on_a_server_and_fails_without_one(served: Served) -> None:
    assert healthcheck(served.port).returncode == 0
    down = healthcheck(free_port())
    assert down.returncode == 1 and down.stderr.startswith("kg-healthcheck: ")


def test_the_image_installs_pyprojects_dependencies_and_the_extras_named() -> None:
    script = DOCKER / "kg" / "requirements.py"
    pyproject = DOCKER.parent / "pyproject.toml"
    listed = subprocess.run(
        [sys.executable, str(script), str(pyproject), "serve"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "pydantic>=2.7,<3" in listed and "uvicorn>=0.30" in listed
    assert not any(r.startswith("kg[") for r in listed)
    bad = subprocess.run(
        [sys.executable, str(script), str(pyproject), "nonesuch"], capture_output=True, text=True
    )
    assert bad.returncode != 0 and "no extra 'nonesuch'" in bad.stderr
