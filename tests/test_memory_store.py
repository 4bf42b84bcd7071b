"""The in-memory store answers like the real one, so properties run on it can be trusted.

Random episode sequences (several subjects and predicates, explicit ends, every trust tier)
and a rollback go through the same facade on both stores; every as-of view, every stored
version (uuids aside), every entity and every episode status must come out the same.
"""

from __future__ import annotations

import bisect
import itertools
from datetime import datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kg import KG
from kg.schemas.graph import Fact, FactEdge
from tests.conftest import examples
from tests.memory_store import MemoryStore
from tests.test_rollback import BOUNDARIES, EPISODES, ingest, view

_groups = itertools.count()


async def snapshot(kg: KG, group: str, marks: list[datetime], episodes: list[str]) -> Any:
    """Everything the two stores must agree on, with uuids and clock readings replaced by
    what they stand for (the same sequence runs at different real times on each store)."""
    stored = await kg.store.find_episodes(group, None, None, include_rolled_back=True)
    # Known at each write's own transaction time (the boundary), and between writes.
    known = sorted({*marks, *(ep.created_at for ep in stored)})
    views = [await view(kg, group, known_at=m, grid=BOUNDARIES) for m in known]
    versions = await kg.history(group_id=group, limit=100_000)
    by_uuid = {f.edge.uuid: f for f in versions}

    def when(x: datetime | None) -> int | None:
        return None if x is None else bisect.bisect_left(marks, x)

    def episode(u: str | None) -> int | str | None:
        return episodes.index(u) if u in episodes else u

    def plain(f: Fact) -> tuple[Any, ...]:
        e: FactEdge = f.edge
        return (
            f.subject,
            f.predicate,
            f.object,
            e.fact,
            e.valid_at,
            e.invalid_at,
            when(e.created_at),
            when(e.expired_at),
            [episode(u) for u in e.episodes],
            e.episode_valid_at,
            episode(e.invalidated_by),
            e.invalidation_reason,
            e.channel,
            e.trust,
            e.extractor,
            e.status,
        )

    def ref(u: str | None) -> Any:
        return None if u is None else plain(by_uuid[u]) if u in by_uuid else "gone"

    rows = sorted(
        repr((plain(f), *(ref(u) for u in (e.fact_uuid, e.supersedes, e.invalidated_edge))))
        for f in versions
        for e in [f.edge]
    )
    names = sorted({x for f in versions for x in (f.subject, f.object)})
    keys = sorted({n.lower() for n in ["Alice", "Bob", "Seoul", "Busan", "Daegu"]})
    entities = sorted(e.name for e in await kg.store.entities_by_key(group, keys))
    statuses = [(episode(ep.uuid), ep.status.value) for ep in stored]
    return views, rows, names, entities, statuses


@examples(6)
@given(episodes=EPISODES, k=st.integers(0, 6))
async def test_the_memory_store_answers_like_the_real_one(
    kg: KG, episodes: list[tuple[str, str, str, int, str, bool]], k: int
) -> None:
    k %= len(episodes)
    group = f"m{next(_groups)}"
    seen = []
    async with KG(MemoryStore()) as mem:  # type: ignore[arg-type]
        for graph in (kg, mem):
            marks = await ingest(graph, group, episodes)
            uuids = [u for u, _ in marks]
            await graph.rollback(uuids[k], group_id=group, dry_run=False)
            times = [m for _, m in marks] + [graph.clock.now()]
            seen.append(await snapshot(graph, group, times, uuids))
    live, memory = seen
    assert memory == live
    assert len(live[0]) == 2 * len(episodes) + 1 and all(len(v) == len(BOUNDARIES) for v in live[0])
