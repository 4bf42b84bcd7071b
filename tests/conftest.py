"""Tests run against a real embedded FalkorDB server with its own data directory (`kg`), the
Neo4j tests against one real Neo4j server for the session (tests/neo4j_server.py), and the
many-example properties of the timeline logic against the in-memory store (`mem`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
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


@pytest.fixture
async def kg(home: Path) -> AsyncIterator[KG]:
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
    return settings(max_examples=n, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip


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
    database; the schema stays, as it would on a server kg has written to before)."""
    graph = await KG.open(neo4j_server.kg_uri)
    try:
        await wipe(graph)
        yield graph
    finally:
        await graph.close()


async def wipe(graph: KG) -> None:
    from kg.store.neo4j import Neo4jStore

    assert isinstance(graph.store, Neo4jStore)
    await graph.store.raw_query("", "MATCH (n) DETACH DELETE n", write=True)
