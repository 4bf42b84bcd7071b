"""Many writers, one server: kg processes racing on one group of an external FalkorDB server,
or of the session's Neo4j 5.26, must leave the timelines one writer would (see
benchmarks/many_writers.py for the harness and the larger runs the design decision quotes).
Each trial writes groups of its own, so the Neo4j database needs no wiping."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import many_writers

from tests.neo4j_server import Neo4jServer


@pytest.fixture(scope="module")
def falkordb_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with many_writers.falkordb_server(tmp_path_factory.mktemp("falkordb")) as uri:
        yield uri


@pytest.fixture(params=["falkordb", "neo4j"])
def server_uri(request: pytest.FixtureRequest) -> str:
    if request.param == "neo4j":
        server: Neo4jServer = request.getfixturevalue("neo4j_server")
        return server.kg_uri
    return str(request.getfixturevalue("falkordb_uri"))


@pytest.mark.parametrize(
    ("scenario", "writers", "episodes", "objects"),
    [("ingest", 3, 60, 2), ("rollback", 2, 40, 1), ("erase", 2, 40, 1)],
)
def test_racing_writers_leave_the_timelines_one_writer_would(
    server_uri: str, tmp_path: Path, scenario: str, writers: int, episodes: int, objects: int
) -> None:
    trial = many_writers.run_trial(
        server_uri, scenario, writers, episodes, objects, seed=7, workdir=tmp_path
    )
    print(many_writers.row(trial))
    assert trial.asof_probes > 100  # the probes ran
    if scenario == "rollback":
        assert trial.rolled_back > 0
    if scenario == "erase":
        assert trial.erased > 0
    assert trial.anomalies == 0, many_writers.row(trial)
