"""kg's image (docker/kg/Containerfile) built and run with podman: build, start, health, a
write and a read over HTTP with `kg.client.AsyncClient`, a clean stop, the data still in the
volume afterwards, and `kg worker` from the same image.

No image registry is reachable here, so the base is a Debian root filesystem made by
docker/container-dev/install (debootstrap). Without podman or the base image the test skips,
naming what is missing; under CI=true (or KG_INSTALL_CONTAINER=1) it first runs the
installer, and under CI=true it fails, naming why, if no engine runs. The run's log (every
engine command, its output, and the container's own log) is printed and, with
KG_CONTAINER_LOG=<file>, written there (docs/container-run.log is one such run).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from kg.client import AsyncClient
from tests.container import BASE, ROOT, Engine, find_engine, install
from tests.served import free_port

CI = os.environ.get("CI") == "true"
INSTALL = CI or os.environ.get("KG_INSTALL_CONTAINER") == "1"
TAG = "localhost/kg:test"


def _engine() -> Engine | str:
    found = find_engine()
    if isinstance(found, str) and INSTALL:
        failed = install()
        found = failed or find_engine()
    return found


ENGINE = _engine()
if isinstance(ENGINE, str) and not CI:
    pytest.skip(ENGINE, allow_module_level=True)


class Log:
    """Every step of the run, as an operator would read it."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        self.lines.append(f"[{time.monotonic() - self.started:7.1f}s] {text}")

    def step(self, engine: Engine, verb: str, *args: str, timeout: float = 120) -> str:
        self.say("$ " + " ".join(engine.command(verb, *args)))
        done = engine.run(verb, *args, timeout=timeout)
        out = (done.stdout + done.stderr).strip()
        self.lines += [f"    {line}" for line in out.splitlines()[-40:]]
        assert done.returncode == 0, f"podman {verb} failed: {out.splitlines()[-1:] or ''}"
        return done.stdout


@pytest.fixture(scope="module")
def engine() -> Engine:
    if isinstance(ENGINE, str):  # only under CI=true
        pytest.fail(f"container test: {ENGINE}")
    return ENGINE


@pytest.fixture
def log() -> Iterator[Log]:
    found = Log()
    yield found
    text = "\n".join(found.lines) + "\n"
    print(text)
    if target := os.environ.get("KG_CONTAINER_LOG"):
        Path(target).write_text(text)


def wait_healthy(engine: Engine, log: Log, name: str, url: str) -> None:
    """The image's own HEALTHCHECK (`podman healthcheck run`) until it passes."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = engine.run("healthcheck", "run", name, timeout=30)
        if done.returncode == 0:
            log.say(f"$ podman healthcheck run {name}: healthy")
            log.say(f"GET {url}/health -> {httpx.get(url + '/health').json()}")
            return
        state = engine.run("inspect", name, "--format", "{{.State.Status}}").stdout.strip()
        assert state == "running", f"the container stopped while starting: {state}"
        time.sleep(1)
    raise AssertionError("the container never became healthy")


async def test_image_serves_writes_reads_and_stops_cleanly(
    engine: Engine, log: Log, tmp_path: Path
) -> None:
    log.say(f"base image {BASE}; engine {' '.join(engine.engine)} {' '.join(engine.limits)}")
    log.step(
        engine,
        "build",
        "--format",
        "docker",
        "-f",
        "docker/kg/Containerfile",
        "-t",
        TAG,
        str(ROOT),
        timeout=1500,
    )
    name, volume = f"kg-test-{secrets.token_hex(4)}", f"kg-test-{secrets.token_hex(4)}"
    config = tmp_path / "kg.toml"
    config.write_text('log_format = "json"\nembedder = "none"\n')
    mounts = [
        "-v",
        f"{volume}:/data",
        "-v",
        f"{config}:/etc/kg/kg.toml:ro",
        "-e",
        "KG_CONFIG=/etc/kg/kg.toml",
    ]
    try:
        made = log.step(
            engine,
            "run",
            "--rm",
            *mounts,
            TAG,
            "keys",
            "create",
            "--role",
            "admin",
            "--group",
            "shop",
            "--json",
        )
        key = json.loads(made)["key"]
        log.lines = [line.replace(key, "kg_[the key]") for line in log.lines]
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log.step(engine, "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8321", *mounts, TAG)
        user = log.step(engine, "exec", name, "id", "-u").strip()
        assert user == "10001", "the server runs as the image's non-root user"
        wait_healthy(engine, log, name, url)

        async with AsyncClient(url, key) as kg:
            when = datetime(2024, 6, 1, tzinfo=UTC)
            fact = {"subject": "Minji", "predicate": "LIVES_IN", "object": "Busan"}
            result = await kg.add_episode(source="facts", reference_time=when, facts=[fact])
            log.say(f"client add_episode -> {result.status} episode {result.episode_uuid}")
            found = [f.object for f in await kg.facts(subject="Minji")]
            log.say(f"client facts(subject='Minji') -> {found}")
            assert found == ["Busan"]

        log.step(engine, "stop", "--time", "30", name, timeout=60)
        code = log.step(engine, "inspect", name, "--format", "{{.State.ExitCode}}").strip()
        assert code == "0", "SIGTERM ends the server cleanly"
        served = log.step(engine, "logs", name)
        lines = [json.loads(line) for line in served.splitlines() if line.startswith("{")]
        assert any(e.get("request_id") for e in lines), "kg.toml's log_format=json applied"

        again = log.step(
            engine,
            "run",
            "--rm",
            *mounts,
            TAG,
            "--group",
            "shop",
            "facts",
            "--subject",
            "Minji",
            "--json",
        )
        assert [f["object"] for f in json.loads(again)] == ["Busan"], "kept in the volume"
        log.step(engine, "run", "--rm", *mounts, TAG, "worker", "--all-groups", "--drain")
    finally:
        engine.run("rm", "--force", "--time", "5", name)
        engine.run("volume", "rm", "--force", volume)
