"""The server is one event loop shared by every tenant: a search's heavy Python work must
leave it free, or one tenant's costly context stalls every other tenant's requests."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from kg import KG
from kg.store.cypher import search as cypher_search

WHEN = datetime(2024, 1, 1, tzinfo=UTC)


async def test_a_large_bm25_pool_is_scored_while_the_event_loop_runs_others(
    falkor_kg: KG, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = cypher_search.THREAD_POOL_FROM + 20
    for i in range(pool):
        await falkor_kg.add_episode(
            source="text",
            content=f"the garden budget, note {i}",
            reference_time=WHEN,
            extract=False,
            name=f"note {i}",
        )
    entered, released = threading.Event(), threading.Event()
    real = cypher_search.bm25

    def scoring_that_needs_the_loop(*args: Any) -> list[float]:
        if len(args[1]) > cypher_search.THREAD_POOL_FROM:
            entered.set()
            # Set by a task on the event loop: it can run only if scoring is not on the loop.
            assert released.wait(5), "the event loop was blocked while a large pool was scored"
        return real(*args)

    async def other_tenant() -> None:
        # The wait is a thread's; its answer is delivered by the loop, as a request would be.
        assert await asyncio.to_thread(entered.wait, 10)
        released.set()

    monkeypatch.setattr(cypher_search, "bm25", scoring_that_needs_the_loop)
    other = asyncio.create_task(other_tenant())
    results = await falkor_kg.search("garden budget", recipe="combined_hybrid_rrf", limit=10)
    await other
    assert entered.is_set() and results.episodes
