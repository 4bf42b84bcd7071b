"""Tests run against a real embedded FalkorDB server with its own data directory (`kg`), or,
for the many-example properties of the timeline logic, the in-memory store (`mem`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from kg import KG, EpisodeResult
from tests.memory_store import MemoryStore


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
