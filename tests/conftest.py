"""Store-facing tests run on both backends: the `backend` fixture is parametrized over an
embedded FalkorDB server with its own data directory and one real Neo4j server for the session
(tests/neo4j_server.py), whose database is emptied before each test; `open_test_kg(backend,
home, ...)` opens kg on either, and `kg` is that with the defaults. Tests that only one
backend can run take `falkor_kg` or open the embedded store themselves, and say why. The
many-example properties of the timeline logic run against the in-memory store (`mem`)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from kg import KG, EpisodeResult
from tests.memory_store import MemoryStore
from tests.neo4j_server import Neo4jServer
from tests.neo4j_server import neo4j_server as start_neo4j


def t(year: int, month: int = 1, day: int = 1) -> datetime:
    return datetime(year, month, day, tzinfo=UTC)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "kg-home"


BACKENDS = ("falkordb", "neo4j")


@dataclass(frozen=True)
class Backend:
    """Where a test's kg lives: the embedded FalkorDB under the test's `home`, or the
    session's Neo4j server (emptied before the test; reopening sees the same data)."""

    name: str
    server: Neo4jServer | None = None

    @property
    def uri(self) -> str | None:
        return self.server.kg_uri if self.server else None

    def files(self, home: Path) -> Path | None:
        """Where this store keeps its files, when the test can read them."""
        return home if self.server is None else self.server.data

    def cli_args(self, home: Path) -> list[str]:
        """The CLI's global options that select this store."""
        return ["--uri", self.server.kg_uri] if self.server else ["--home", str(home)]

    def __str__(self) -> str:
        return self.name


async def open_test_kg(backend: Backend, home: Path, **kwargs: Any) -> KG:
    """`KG.open` on the test's backend, with any of its keyword arguments."""
    if backend.server is None:
        return await KG.open(home=home, **kwargs)
    return await KG.open(backend.server.kg_uri, **kwargs)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "falkordb":
        return Backend("falkordb")
    server: Neo4jServer = request.getfixturevalue("neo4j_server")
    server.empty()
    return Backend("neo4j", server)


@pytest.fixture
def neo4j_backend(neo4j_server: Neo4jServer) -> Backend:
    """The Neo4j backend alone, emptied: for what only Neo4j does."""
    neo4j_server.empty()
    return Backend("neo4j", neo4j_server)


@pytest.fixture
def backend_named(request: pytest.FixtureRequest) -> Callable[[str], Backend]:
    """Backends by name, for tests that use two at once (export from one, import into the
    other); the Neo4j database is emptied once per test."""

    def get(name: str) -> Backend:
        if name == "falkordb":
            return Backend("falkordb")
        backend: Backend = request.getfixturevalue("neo4j_backend")
        return backend

    return get


# Transfer routes between the two backends, both ways: "source->destination".
ROUTES = ("falkordb->neo4j", "neo4j->falkordb")


@pytest.fixture
async def kg(backend: Backend, home: Path) -> AsyncIterator[KG]:
    graph = await open_test_kg(backend, home)
    try:
        yield graph
    finally:
        await graph.close()


@pytest.fixture
async def falkor_kg(home: Path) -> AsyncIterator[KG]:
    """The embedded FalkorDB store only: for tests of FalkorDB's own behaviour."""
    graph = await KG.open(home=home)
    try:
        yield graph
    finally:
        await graph.close()


@pytest.fixture
async def mem() -> AsyncIterator[KG]:
    """The real planners and facade over `tests.memory_store.MemoryStore`: no server."""
    async with KG(MemoryStore()) as graph:  # type: ignore[arg-type]
        yield graph


def examples(n: int) -> settings:
    """Hypothesis settings for async properties that share one store across examples."""
    return settings(
        max_examples=n, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )


def fact(
    subject: str,
    predicate: str,
    obj: str,
    valid_at: datetime | str | None = None,
    invalid_at: datetime | str | None = None,
) -> dict[str, Any]:
    row: dict[str, Any] = {"subject": subject, "predicate": predicate, "object": obj}
    for key, value in (("valid_at", valid_at), ("invalid_at", invalid_at)):
        if value is not None:
            row[key] = value.isoformat() if isinstance(value, datetime) else value
    return row


async def add(
    kg: KG, ref: datetime, *facts: tuple[str, str, str] | dict[str, Any], **fields: Any
) -> EpisodeResult:
    """Add a structured episode; facts as (subject, predicate, object) or full dicts."""
    rows = [
        f if isinstance(f, dict) else {"subject": f[0], "predicate": f[1], "object": f[2]}
        for f in facts
    ]
    return await kg.add_episode(source="facts", reference_time=ref, facts=rows, **fields)


def objects(facts: list[Any]) -> list[str]:
    return sorted(f.object for f in facts)


@pytest.fixture(scope="session")
def neo4j_server() -> Iterator[Neo4jServer]:
    """One Neo4j 5.26 server for the whole run (see tests/neo4j_server.py)."""
    with start_neo4j() as server:
        yield server


@pytest.fixture
async def neo4j_kg(neo4j_server: Neo4jServer) -> AsyncIterator[KG]:
    """kg on the session's Neo4j, its database emptied first (Community has one user
    database; kg's schema stays, as it would on a server kg has written to before)."""
    neo4j_server.empty()
    graph = await KG.open(neo4j_server.kg_uri)
    try:
        yield graph
    finally:
        await graph.close()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the linters of tests/test_lint.py, if the run includes them, beside the tests."""
    lints = [i for i in session.items if i.nodeid.startswith("tests/test_lint.py::")]
    if lints:
        lint = sys.modules["tests.test_lint"]
        lint.start(i.callspec.params["name"] for i in lints if hasattr(i, "callspec"))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A run that never waited for its linters (it was stopped) ends them."""
    lint = sys.modules.get("tests.test_lint")
    if lint is not None:
        lint.stop()
