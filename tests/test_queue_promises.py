"""Rollback and erasure reach the background queue: an episode not yet written (queued, leased
by a worker, or failed) is cancelled by a rollback and deleted by an erasure, and a worker
holding it writes nothing afterwards, whichever comes first. On both backends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from kg import KG
from kg.errors import LeaseLostError
from kg.queue import Worker
from kg.rollback import plan_rollback
from kg.schemas.graph import EpisodeStatus, EpisodicNode
from kg.schemas.plan import GroupVersion, WritePlan
from tests.conftest import Backend, open_test_kg, t
from tests.queue_llm import RuleLLM
from tests.store_probe import graph_dump


@pytest.fixture
async def qkg(backend: Backend, home: Path) -> AsyncIterator[tuple[KG, RuleLLM]]:
    llm = RuleLLM()
    graph = await open_test_kg(backend, home, llm=llm)
    try:
        yield graph, llm
    finally:
        await graph.close()


async def node(kg: KG, uuid: str) -> EpisodicNode:
    [found] = await kg.store.episodes("default", [uuid])
    return found


async def lives(kg: KG, who: str) -> list[str]:
    return sorted(f.object for f in await kg.facts(subject=who, predicate="LIVES_IN"))


async def test_rolling_back_a_queued_episode_cancels_it(qkg: tuple[KG, RuleLLM]) -> None:
    kg, llm = qkg
    await kg.add_episode(
        source="message", content="Minji: I live in Seoul.", reference_time=t(2024, 1, 1)
    )
    move = "Minji: I moved to Busan 2 weeks ago."
    queued = await kg.add_episode(
        source="message", content=move, reference_time=t(2024, 6, 1), wait=False
    )
    dry = await kg.rollback(queued.episode_uuid)
    assert dry.cancelled == [queued.episode_uuid] and not dry.applied and not dry.noop
    assert (await node(kg, queued.episode_uuid)).status is EpisodeStatus.queued  # a dry run

    done = await kg.rollback(queued.episode_uuid, dry_run=False)
    assert done.applied and done.cancelled == [queued.episode_uuid]
    cancelled = await node(kg, queued.episode_uuid)
    assert cancelled.status is EpisodeStatus.rolled_back and cancelled.lease_owner is None
    stats = await Worker(kg).drain()
    assert stats.claimed == 0 and move not in llm.calls  # never extracted
    assert await lives(kg, "Minji") == ["Seoul"]  # the move did not close the user's fact
    assert (await node(kg, queued.episode_uuid)).status is EpisodeStatus.rolled_back
    again = await kg.add_episode(
        source="message", content=move, reference_time=t(2024, 6, 1), wait=False
    )
    assert again.status == "duplicate"  # as for any rolled-back episode
    assert (await kg.rollback(queued.episode_uuid, dry_run=False)).noop
    [event] = [e for e in await kg.log() if e.kind == "rollback"]
    assert event.episodes == [queued.episode_uuid]


async def test_a_leased_episode_rolled_back_is_never_written(qkg: tuple[KG, RuleLLM]) -> None:
    """The rollback lands while a worker holds the episode, extracted: its write is refused."""
    kg, _ = qkg
    queued = await kg.add_episode(
        source="message",
        content="Minji: I live in Busan.",
        reference_time=t(2024, 6, 1),
        wait=False,
    )
    now = kg.clock.now()
    [claimed] = await kg.store.claim(
        "default", "w", [queued.episode_uuid], now, now + timedelta(seconds=60)
    )
    extracted = await kg.pipeline.extract(claimed)
    report = await kg.rollback(queued.episode_uuid, dry_run=False)
    assert report.cancelled == [queued.episode_uuid]
    with pytest.raises(LeaseLostError):
        await kg.pipeline.complete(claimed, "w", extracted)
    assert await lives(kg, "Minji") == []
    assert (await node(kg, queued.episode_uuid)).status is EpisodeStatus.rolled_back


async def test_a_rollback_racing_the_workers_write_wins(qkg: tuple[KG, RuleLLM]) -> None:
    """The rollback commits between the worker's plan and its write (as another process
    would): the write checks the lease in its own atomic unit, and is refused."""
    kg, _ = qkg
    queued = await kg.add_episode(
        source="message",
        content="Minji: I live in Busan.",
        reference_time=t(2024, 6, 1),
        wait=False,
    )
    now = kg.clock.now()
    [claimed] = await kg.store.claim(
        "default", "w", [queued.episode_uuid], now, now + timedelta(seconds=60)
    )
    extracted = await kg.pipeline.extract(claimed)
    real_apply = kg.store.apply
    plans: list[WritePlan] = []

    async def rolled_back_meanwhile(plan: WritePlan) -> GroupVersion:
        plans.append(plan)
        rewrite, report = await plan_rollback(
            kg.store, kg.ontology, "default", [queued.episode_uuid], kg.clock.now()
        )
        assert report.cancelled == [queued.episode_uuid]
        rewrite.base = await kg.store.version("default")
        await kg.store.rewrite(rewrite)
        return await real_apply(plan)

    kg.store.apply = rolled_back_meanwhile  # type: ignore[method-assign]
    with pytest.raises(LeaseLostError):
        await kg.pipeline.complete(claimed, "w", extracted)
    assert len(plans) == 1  # refused for its lease, not re-planned
    assert await lives(kg, "Minji") == []
    assert (await node(kg, queued.episode_uuid)).status is EpisodeStatus.rolled_back


async def test_rolling_back_a_failed_episode_cancels_it(backend: Backend, home: Path) -> None:
    bad = "Minji: I live in Incheon."
    async with await open_test_kg(backend, home, llm=RuleLLM(invalid=frozenset({bad}))) as kg:
        queued = await kg.add_episode(
            source="message", content=bad, reference_time=t(2024, 6, 1), wait=False
        )
        assert (await Worker(kg).drain()).failed == 1
        assert (await node(kg, queued.episode_uuid)).status is EpisodeStatus.failed
        report = await kg.rollback(queued.episode_uuid, dry_run=False)
        assert report.cancelled == [queued.episode_uuid]
        assert (await node(kg, queued.episode_uuid)).status is EpisodeStatus.rolled_back
        again = await kg.add_episode(
            source="message", content=bad, reference_time=t(2024, 6, 1), wait=False
        )
        assert again.status == "duplicate"  # a failed one would be retried; this one is undone


async def test_erasing_a_subject_named_only_in_the_queue(qkg: tuple[KG, RuleLLM]) -> None:
    """No entity yet: the erasure still finds the queued, leased and failed records naming
    the subject, deletes them, says so, and the worker holding one writes nothing."""
    kg, llm = qkg
    failing = "Yan Ghost: I like chess."
    llm.invalid = frozenset({failing})
    failed = await kg.add_episode(
        source="message", content=failing, reference_time=t(2024, 5, 1), wait=False
    )
    assert (await Worker(kg).drain()).failed == 1
    queued = await kg.add_episode(
        source="message",
        content="Yan Ghost: I live in Quito.",
        reference_time=t(2024, 6, 1),
        wait=False,
    )
    leased = await kg.add_episode(
        source="message",
        content="Yan Ghost: I work at Naver.",
        reference_time=t(2024, 6, 2),
        wait=False,
    )
    other = await kg.add_episode(
        source="message",
        content="Minji: I live in Seoul.",
        reference_time=t(2024, 6, 3),
        wait=False,
    )
    now = kg.clock.now()
    [claimed] = await kg.store.claim(
        "default", "w", [leased.episode_uuid], now, now + timedelta(seconds=60)
    )
    extracted = await kg.pipeline.extract(claimed)

    preview = await kg.erase_entity("yan ghost", dry_run=True)
    assert preview.dry_run and preview.queue_records_deleted == 3
    assert (await node(kg, queued.episode_uuid)).status is EpisodeStatus.queued  # untouched
    receipt = await kg.erase_entity("yan ghost")
    assert (receipt.episodes_deleted, receipt.queue_records_deleted) == (3, 3)
    assert receipt.entities_deleted == 0 and receipt.other_facts_removed == []
    gone = [failed.episode_uuid, queued.episode_uuid, leased.episode_uuid]
    assert await kg.store.episodes("default", gone) == []
    with pytest.raises(LeaseLostError):  # the worker that held one wakes up: nothing written
        await kg.pipeline.complete(claimed, "w", extracted)
    await Worker(kg).drain()
    assert await kg.facts(subject="Yan Ghost") == [] and await lives(kg, "Minji") == ["Seoul"]
    assert (await node(kg, other.episode_uuid)).status is EpisodeStatus.ingested
    assert "ghost" not in await graph_dump(kg)


async def test_rolling_back_a_source_cancels_its_queued_episodes(qkg: tuple[KG, RuleLLM]) -> None:
    kg, llm = qkg
    page = "https://evil.example/page"
    written = await kg.add_episode(
        source="message",
        content="Minji: I live in Busan.",
        reference_time=t(2024, 6, 1),
        source_description=page,
    )
    queued = await kg.add_episode(
        source="message",
        content="Minji: I work at Kakao.",
        reference_time=t(2024, 6, 2),
        source_description=page,
        wait=False,
    )
    report = await kg.rollback_source(page, dry_run=False)
    assert report.episodes == [written.episode_uuid]
    assert report.cancelled == [queued.episode_uuid]
    await Worker(kg).drain()
    assert await kg.facts(subject="Minji") == []
    assert "Minji: I work at Kakao." not in llm.calls
