"""Background ingestion: the queue in the store, the worker's pipeline, and what they promise."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kg import KG
from kg.errors import LeaseLostError
from kg.ingest.resolution import Answer
from kg.queue import Worker, stage_json
from kg.schemas.episode import Episode
from kg.schemas.extraction import FactMatch, Resolution
from kg.schemas.graph import EpisodeStatus, EpisodicNode
from kg.schemas.plan import GroupVersion, WritePlan
from tests.conftest import t
from tests.queue_llm import RuleLLM, conversation
from tests.test_rollback import view

GRID = [t(2023, m, d) for m in range(1, 13) for d in (1, 15)] + [t(2024, m) for m in range(1, 13)]


@pytest.fixture
async def rkg(home: Path) -> AsyncIterator[tuple[KG, RuleLLM]]:
    llm = RuleLLM(delay=0.02)
    async with await KG.open(home=home, llm=llm) as graph:
        yield graph, llm


async def episodes_of(kg: KG, group: str) -> list[EpisodicNode]:
    rows = await kg.store.raw_query(
        group, "MATCH (e:Episodic) WHERE e.group_id = $g RETURN properties(e) AS ep", {"g": group}
    )
    return [EpisodicNode.model_validate(kg.store._decode(r["ep"])) for r in rows]  # type: ignore[attr-defined]


async def snapshot(kg: KG, group: str) -> dict[str, Any]:
    """The group's graph in terms both ingests share: views at every grid time, now and as
    known after each episode; every version with its provenance, episodes named by content
    hash (uuids and transaction times differ between two ingests, nothing else may)."""
    eps = await episodes_of(kg, group)
    name = {e.uuid: e.content_hash for e in eps}
    order = sorted(eps, key=lambda e: e.created_at)
    versions = sorted(
        repr(
            (
                f.subject,
                f.predicate,
                f.object,
                f.edge.valid_at,
                f.edge.invalid_at,
                f.edge.status.value,
                f.edge.expired_at is None,
                tuple(name[u] for u in f.edge.episodes),
                tuple(f.edge.episode_valid_at),
                name.get(f.edge.invalidated_by or ""),
                f.edge.invalidation_reason,
            )
        )
        for f in await kg.history(group_id=group, limit=100_000)
    )
    known = [await view(kg, group, known_at=e.created_at, grid=GRID[::4]) for e in order]
    return {
        "now": await view(kg, group, grid=GRID),
        "known_after_each": known,
        "versions": versions,
        "order": [e.content_hash for e in order],
        "episodes": sorted(
            (
                e.content_hash,
                e.status.value,
                e.facts_added,
                e.facts_closed,
                e.facts_reinforced,
                e.extraction,
            )
            for e in eps
        ),
    }


async def test_an_enqueued_episode_is_found_at_once(rkg: tuple[KG, RuleLLM]) -> None:
    kg, llm = rkg
    r = await kg.add_episode(
        source="message",
        content="Minji: I moved to Busan 2 weeks ago.",
        reference_time=t(2024, 6, 1),
        wait=False,
    )
    assert r.status == "queued"
    found = await kg.search("Busan", recipe="episodes_bm25")  # before any worker ran
    assert [h.episode.uuid for h in found.episodes] == [r.episode_uuid]
    assert llm.calls == {}  # nothing extracted yet
    [node] = await episodes_of(kg, "default")
    assert node.status is EpisodeStatus.queued and node.queued_at is not None
    # Known from the moment it was queued: an as-of search just before does not see it.
    before = await kg.search(
        "Busan", recipe="episodes_bm25", known_at=node.queued_at - timedelta(microseconds=1)
    )
    assert before.episodes == []
    await Worker(kg).drain()
    [fact] = await kg.facts(subject="Minji")
    assert fact.object == "Busan" and fact.edge.episodes == [r.episode_uuid]
    found = await kg.search("Busan", recipe="episodes_bm25")
    assert [h.episode.uuid for h in found.episodes] == [r.episode_uuid]  # the same node


async def test_an_enqueued_episode_is_found_by_cosine_at_once(home: Path) -> None:
    from kg import local_minilm

    async with await KG.open(home=home, embedder=local_minilm()) as kg:
        r = await kg.add_episode(
            source="message",
            content="Minji: my cat is called Dubu.",
            reference_time=t(2024, 6, 1),
            wait=False,
        )
        found = await kg.search("what is the name of the pet", recipe="episodes_cosine")
        assert [h.episode.uuid for h in found.episodes] == [r.episode_uuid]


async def test_pipelined_ingest_equals_one_by_one(rkg: tuple[KG, RuleLLM]) -> None:
    kg, llm = rkg
    convo = conversation(60, seed=11)
    for ep in convo:  # the reference: one by one, in reference-time order
        await kg.add_episode(**ep, group_id="sequential")
    reference = await snapshot(kg, "sequential")
    assert any("False" in v for v in reference["versions"])  # closures happened
    for ep in convo:
        await kg.add_episode(**ep, group_id="queued", wait=False)
    llm.max_in_flight = 0
    stats = await Worker(kg, concurrency=8).drain()
    assert stats.completed == len(convo) and stats.failed == 0
    assert llm.max_in_flight > 1  # extraction calls did overlap
    assert await snapshot(kg, "queued") == reference
    # Arriving backwards, the queue still writes them in reference-time order (ties, equal
    # reference times, go by arrival): every timeline comes out the same.
    for ep in reversed(convo):
        await kg.add_episode(**ep, group_id="backwards", wait=False)
    await Worker(kg, concurrency=8).drain()
    backwards = await snapshot(kg, "backwards")
    assert (backwards["now"], backwards["versions"]) == (reference["now"], reference["versions"])


async def test_extraction_keeps_going_while_a_write_waits(
    rkg: tuple[KG, RuleLLM], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first write is held until 12 extractions are done: the worker claims and extracts
    # ahead whatever its writes are doing (more than its 2 * concurrency extractions), and
    # never has more than `concurrency` calls in flight.
    kg, llm = rkg
    convo = conversation(30, seed=5)
    for ep in convo:
        await kg.add_episode(**ep, group_id="g", wait=False)
    complete = kg.pipeline.complete
    extracted_while_held: list[int] = []

    async def held_first(*args: Any, **kwargs: Any) -> Any:
        if not extracted_while_held:
            for _ in range(500):
                if sum(llm.calls.values()) >= 12:
                    break
                await asyncio.sleep(0.01)
            extracted_while_held.append(sum(llm.calls.values()))
        return await complete(*args, **kwargs)

    monkeypatch.setattr(kg.pipeline, "complete", held_first)
    llm.max_in_flight = 0
    stats = await Worker(kg.pipeline, concurrency=2).drain()  # driven by the pipeline alone
    assert extracted_while_held[0] >= 12
    assert llm.max_in_flight <= 2
    assert stats.completed == len(convo) and stats.failed == 0


async def test_a_resolution_reply_got_ahead_is_used_only_for_the_same_question(
    rkg: tuple[KG, RuleLLM], monkeypatch: pytest.MonkeyPatch
) -> None:
    # "works at Busan" joins the same two entities as the stored "lives in Busan" under
    # another predicate: resolution asks about it. The reply asked ahead (scripted here to
    # say it contradicts) is used when the question in turn is the same, and not otherwise.
    kg, llm = rkg
    purposes: list[str] = []
    structured = llm.structured

    async def counted(*args: Any, **kwargs: Any) -> Any:
        purposes.append(kwargs["purpose"])
        return await structured(*args, **kwargs)

    monkeypatch.setattr(llm, "structured", counted)
    for group, between in (("same", False), ("changed", True)):
        await kg.add_episode(
            source="message",
            content="Minji: I live in Busan.",
            reference_time=t(2023, 1, 1),
            group_id=group,
        )
        r = await kg.add_episode(
            source="message",
            content="Minji: I work at Busan.",
            reference_time=t(2023, 3, 1),
            group_id=group,
            wait=False,
        )
        now = kg.clock.now()
        lease = now + timedelta(seconds=60)
        [node] = await kg.store.claim(group, "me", [r.episode_uuid], now, lease)
        extracted = await kg.pipeline.extract(node)
        q = await kg.pipeline.resolution_question(node, extracted)
        assert q is not None and "F1" in q.messages[-1]["content"]
        answered = Answer(q.key, Resolution(facts=[FactMatch(fact="F1", contradicts=["X1"])]), [])
        if between:  # another live fact between the two entities: the question changes
            await kg.add_episode(
                source="message",
                content="Minji: I like Busan.",
                reference_time=t(2023, 2, 1),
                group_id=group,
            )
        purposes.clear()
        done = await kg.pipeline.complete(node, "me", extracted, answered)
        lives = await kg.facts(group_id=group, predicate="LIVES_IN", valid_at=t(2023, 6, 1))
        if between:  # asked again in turn (the scripted model merges nothing): still lives there
            assert purposes == ["resolve"] and [f.object for f in lives] == ["Busan"]
        else:  # the reply got ahead was used: no call in turn, and it closed the old fact
            assert purposes == [] and lives == []
            assert done.summary.facts_contradicted == 1


async def test_a_dead_workers_episode_is_taken_over_and_its_late_write_refused(
    rkg: tuple[KG, RuleLLM],
) -> None:
    kg, llm = rkg
    for ep in conversation(3, seed=3):
        await kg.add_episode(**ep, wait=False)
    now = kg.clock.now()
    ready, busy = await kg.store.ready("default", "dead", now, 10)
    assert len(ready) == 3 and not busy
    first = ready[0]
    [claimed] = await kg.store.claim(
        "default", "dead", [first.uuid], now, now + timedelta(seconds=0.5)
    )
    extracted = await kg.pipeline.extract(claimed)  # the dead worker got its extraction...
    assert await kg.store.stage("default", first.uuid, "dead", stage_json(extracted))
    calls = dict(llm.calls)
    # ...and died. While its lease lives, nobody else may work on the group.
    assert await kg.store.ready("default", "other", kg.clock.now(), 10) == ([], True)
    await asyncio.sleep(0.6)
    stats = await Worker(kg, poll_seconds=0.05).drain()
    assert stats.completed == 3
    assert llm.calls[first.content] == calls[first.content] == 1  # the staged one, not again
    with pytest.raises(LeaseLostError):  # the dead worker wakes up: nothing written
        await kg.pipeline.complete(claimed, "dead", extracted)
    nodes = await episodes_of(kg, "default")
    assert {n.status for n in nodes} == {EpisodeStatus.ingested}
    taken = next(n for n in nodes if n.uuid == first.uuid)
    assert taken.attempts == 2 and taken.lease_owner is None and taken.staged is None


async def test_a_worker_waiting_on_another_workers_lease_does_not_spin(
    rkg: tuple[KG, RuleLLM], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drain whose every queued group is leased elsewhere asks again after a wait that
    grows to `poll_seconds`, not at once: with several `kg worker` processes on one server,
    the idle ones spun a query per round trip and took the CPU the busy one needed."""
    kg, _ = rkg
    for ep in conversation(2, seed=5):
        await kg.add_episode(**ep, wait=False)
    now = kg.clock.now()
    ready, _ = await kg.store.ready("default", "other", now, 10)
    await kg.store.claim("default", "other", [ready[0].uuid], now, now + timedelta(seconds=1.5))
    asked = 0
    ask = kg.store.ready

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal asked
        asked += 1
        return await ask(*args, **kwargs)

    monkeypatch.setattr(kg.store, "ready", counted)
    stats = await Worker(kg, poll_seconds=0.5).drain()  # waits out the lease, then works
    assert stats.completed == 2
    # 1.5 s of waiting at 50, 100, 200, 400 ms, then every 500 ms: about 6 rounds of asking.
    assert asked <= 15, asked
    assert all(len(f.edge.episodes) == 1 for f in await kg.history(limit=1000))


async def test_idempotency_key_makes_a_resent_turn_a_duplicate(rkg: tuple[KG, RuleLLM]) -> None:
    kg, _ = rkg
    first = await kg.add_episode(
        source="message",
        content="Minji: I live in Seoul.",
        reference_time=t(2024, 1, 1),
        session_id="chat-1",
        turns=(3, 3),
        wait=False,
    )
    # The client retried with a re-rendered text: same source, session and turns.
    again = await kg.add_episode(
        source="message",
        content="Minji:  I live in Seoul!",
        reference_time=t(2024, 1, 1),
        session_id="chat-1",
        turns=(3, 3),
        wait=False,
    )
    assert (again.status, again.episode_uuid) == ("duplicate", first.episode_uuid)
    waited = await kg.add_episode(
        source="message",
        content="Minji: I live in Seoul, yes.",
        reference_time=t(2024, 1, 1),
        session_id="chat-1",
        turns=(3, 3),
    )
    assert (waited.status, waited.episode_uuid) == ("duplicate", first.episode_uuid)
    other = await kg.add_episode(
        source="message",
        content="Minji: I live in Seoul!",
        reference_time=t(2024, 1, 1),
        session_id="chat-1",
        turns=(4, 4),
        wait=False,
    )
    assert other.status == "queued"
    with pytest.raises(ValueError, match="session_id"):
        Episode(source="message", content="x", reference_time=t(2024), turns=(1, 2))


async def test_debounce_holds_a_session_until_it_goes_quiet(rkg: tuple[KG, RuleLLM]) -> None:
    kg, _ = rkg
    one = await kg.add_episode(
        source="message",
        content="Minji: I live in Seoul.",
        reference_time=t(2024, 1, 1),
        session_id="s",
        wait=False,
        after_seconds=30,
    )
    await kg.add_episode(
        source="message", content="Jun: I live in Busan.", reference_time=t(2024, 1, 2), wait=False
    )
    now = kg.clock.now()
    ready, _ = await kg.store.ready("default", "w", now, 10)
    assert [n.content for n in ready] == ["Jun: I live in Busan."]
    held = next(n for n in await episodes_of(kg, "default") if n.uuid == one.episode_uuid)
    assert held.next_attempt_at is not None
    # A new message in the session restarts the wait for the whole session.
    await kg.add_episode(
        source="message",
        content="Minji: I work at Naver.",
        reference_time=t(2024, 1, 3),
        session_id="s",
        wait=False,
        after_seconds=60,
    )
    later = next(n for n in await episodes_of(kg, "default") if n.uuid == one.episode_uuid)
    assert later.next_attempt_at is not None and later.next_attempt_at > held.next_attempt_at
    ready, _ = await kg.store.ready("default", "w", later.next_attempt_at, 10)
    assert len(ready) == 3  # all of it, once the session has been quiet long enough


async def test_session_timeout_waits_for_the_session_to_end(rkg: tuple[KG, RuleLLM]) -> None:
    kg, _ = rkg
    await kg.add_episode(
        source="message",
        content="Minji: I live in Seoul.",
        reference_time=t(2024, 1, 1),
        session_id="s",
        wait=False,
    )
    stats = await asyncio.wait_for(Worker(kg, session_timeout=0.5, poll_seconds=0.05).drain(), 10)
    assert stats.completed == 1
    [node] = await episodes_of(kg, "default")
    assert node.queued_at is not None
    assert (node.created_at - node.queued_at).total_seconds() >= 0.5


async def test_transient_failures_retry_and_invalid_replies_fail_recorded(home: Path) -> None:
    flaky, broken = "Minji: I live in Seoul.", "Jun: I live in Busan."
    llm = RuleLLM(fail={flaky: 2}, invalid=frozenset({broken}))
    async with await KG.open(home=home, llm=llm) as kg:
        for i, text in enumerate((flaky, broken)):
            await kg.add_episode(
                source="message", content=text, reference_time=t(2024, 1, i + 1), wait=False
            )
        stats = await Worker(kg, backoff_seconds=0.05, poll_seconds=0.05).drain()
        assert (stats.completed, stats.failed, stats.retried) == (1, 1, 2)
        # Calls answered: Seoul's extraction, and the broken reply with its retry.
        assert stats.llm_calls == 3
        [seoul] = await kg.facts(subject="Minji")
        assert seoul.object == "Seoul"
        nodes = {n.content: n for n in await episodes_of(kg, "default")}
        assert nodes[flaky].status is EpisodeStatus.ingested and nodes[flaky].attempts == 3
        assert nodes[flaky].failure_reasons == ["llm_unavailable", "llm_unavailable"]
        assert nodes[broken].status is EpisodeStatus.failed
        assert nodes[broken].failure_reasons == ["llm_output"]  # failed at once, recorded
        assert nodes[broken].llm_calls == 2  # the reply and its corrective retry
        m = (await kg.metrics()).queue
        assert (m.done, m.failed, m.queued, m.retries) == (1, 1, 0, 2)
        assert m.failures_by_reason == {"llm_unavailable": 2, "llm_output": 1}
        assert m.latency_samples == 1 and m.latency_p95_s is not None
        # Sending the failed one again retries it, as for a waiting add_episode.
        llm.invalid = frozenset()
        again = await kg.add_episode(
            source="message", content=broken, reference_time=t(2024, 1, 2), wait=False
        )
        assert again.status == "queued"
        await Worker(kg).drain()
        assert [f.object for f in await kg.facts(subject="Jun")] == ["Busan"]


async def test_a_stopping_worker_hands_back_what_it_has_not_written(home: Path) -> None:
    llm = RuleLLM(delay=0.3, max_concurrency=2)
    async with await KG.open(home=home, llm=llm) as kg:
        for ep in conversation(8, seed=5):
            await kg.add_episode(**ep, wait=False)
        wrote = asyncio.Event()
        worker = Worker(kg, poll_seconds=0.05, on_result=lambda _: wrote.set())
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(wrote.wait(), 10)
        await worker.stop()
        stats = await asyncio.wait_for(task, 10)
        assert stats.released > 0
        nodes = await episodes_of(kg, "default")
        assert {n.status for n in nodes} == {EpisodeStatus.ingested, EpisodeStatus.queued}
        for n in nodes:
            if n.status is EpisodeStatus.queued:
                assert n.lease_owner is None and n.attempts == 0  # the claim was not counted
        assert (await Worker(kg).drain()).completed == 8 - stats.completed


async def test_stop_within_gives_up_an_extraction_that_outlasts_it(home: Path) -> None:
    """`stop_within` bounds a stop: an extraction still in flight when the time runs out is
    given up and its episode handed back, the claim not counted; a written one stays."""
    llm = RuleLLM(max_concurrency=1)
    stuck = asyncio.Event()

    async def never(*args: Any) -> tuple[str, int, int]:
        stuck.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async with await KG.open(home=home, llm=llm) as kg:
        await kg.add_episode(**conversation(1, seed=3)[0], wait=False)
        worker = Worker(kg, poll_seconds=0.05)
        llm._complete = never  # type: ignore[method-assign]
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(stuck.wait(), 10)
        stats = await asyncio.wait_for(worker.stop_within(task, 0.2), 10)
        assert stats.released == 1 and stats.completed == 0
        (node,) = await episodes_of(kg, "default")
        assert node.status is EpisodeStatus.queued
        assert node.lease_owner is None and node.attempts == 0


async def test_structured_episodes_queue_without_an_llm(kg: KG) -> None:
    r = await kg.add_episode(
        source="facts",
        reference_time=t(2024),
        facts=[{"subject": "Ara", "predicate": "LIVES_IN", "object": "Jeju"}],
        wait=False,
    )
    assert r.status == "queued" and await kg.facts(subject="Ara") == []
    assert (await Worker(kg).drain()).completed == 1
    [f] = await kg.facts(subject="Ara")
    assert f.edge.episodes == [r.episode_uuid]


async def test_a_worker_without_an_llm_leaves_text_episodes_alone(kg: KG) -> None:
    await kg.add_episode(
        source="message", content="Minji: I live in Seoul.", reference_time=t(2024), wait=False
    )
    worker = Worker(kg, poll_seconds=0.05)
    task = asyncio.create_task(worker.run())
    await asyncio.sleep(0.5)
    await worker.stop()
    await task
    [node] = await episodes_of(kg, "default")
    assert node.status is EpisodeStatus.queued and node.attempts == 0 and node.error is None


@pytest.fixture(params=["falkordb", "neo4j"])
async def backend_kg(request: pytest.FixtureRequest, home: Path) -> AsyncIterator[KG]:
    if request.param == "falkordb":
        graph = await KG.open(home=home, llm=RuleLLM(delay=0.01))
    else:
        server = request.getfixturevalue("neo4j_server")
        server.empty()
        graph = await KG.open(server.kg_uri, llm=RuleLLM(delay=0.01))
    try:
        yield graph
    finally:
        await graph.close()


async def test_racing_claims_give_a_group_to_one_worker(backend_kg: KG) -> None:
    kg = backend_kg
    for ep in conversation(12, seed=2):
        await kg.add_episode(**ep, wait=False)
    uuids = [n.uuid for n in (await kg.store.ready("default", "x", kg.clock.now(), 50))[0]]
    for _ in range(5):
        now = kg.clock.now()
        got = await asyncio.gather(
            *(
                kg.store.claim("default", f"w{i}", uuids, now, now + timedelta(seconds=30))
                for i in range(8)
            )
        )
        winners = [i for i, nodes in enumerate(got) if nodes]
        assert len(winners) == 1 and len(got[winners[0]]) == len(uuids)
        owners = {n.lease_owner for n in await episodes_of(kg, "default")}
        assert owners == {f"w{winners[0]}"}
        for u in uuids:  # hand all back for the next round
            assert await kg.store.release("default", u, f"w{winners[0]}", failed=False)


async def test_two_workers_on_one_group_write_it_as_one(backend_kg: KG) -> None:
    kg = backend_kg
    convo = conversation(30, seed=9)
    for ep in convo:
        await kg.add_episode(**ep, group_id="sequential")
    for ep in convo:
        await kg.add_episode(**ep, group_id="queued", wait=False)
    a, b = Worker(kg, groups=["queued"]), Worker(kg, groups=["queued"])
    sa, sb = await asyncio.gather(a.drain(), b.drain())
    assert sa.completed + sb.completed == len(convo)
    assert await snapshot(kg, "queued") == await snapshot(kg, "sequential")


async def test_the_leased_write_checks_its_lease_and_the_version_in_one_unit(
    backend_kg: KG,
) -> None:
    """The write completing a queued episode is fenced like every write (kg.versioned): a
    version moved by another writer between its plan and its write refuses the stale plan,
    and the worker re-plans; a lost lease refuses the write whatever the version."""
    kg = backend_kg
    for ep in conversation(2, seed=4):
        await kg.add_episode(**ep, wait=False)
    now = kg.clock.now()
    first, second = (await kg.store.ready("default", "w", now, 10))[0]
    until = now + timedelta(seconds=60)
    [node] = await kg.store.claim("default", "w", [first.uuid], now, until)
    real_apply = kg.store.apply
    plans: list[WritePlan] = []

    async def overtaken(plan: WritePlan) -> GroupVersion:
        plans.append(plan)
        if len(plans) == 1:  # another writer lands between this plan's reads and its write
            await kg.store.set_hold("default", await kg.store.version("default"), None)
        return await real_apply(plan)

    kg.store.apply = overtaken  # type: ignore[method-assign]
    done = await kg.pipeline.complete(node, "w", await kg.pipeline.extract(node))
    assert done.attempts == 2 and len(plans) == 2 and plans[0].base != plans[1].base
    assert all(p.lease_owner == "w" for p in plans)

    now = kg.clock.now()
    [node] = await kg.store.claim("default", "w", [second.uuid], now, until)
    extracted = await kg.pipeline.extract(node)
    plans.clear()

    async def taken_over(plan: WritePlan) -> GroupVersion:
        plans.append(plan)  # another worker takes the episode over, another writer writes
        assert await kg.store.release("default", second.uuid, "w", failed=False)
        later = kg.clock.now()
        assert await kg.store.claim("default", "z", [second.uuid], later, until)
        await kg.store.set_hold("default", await kg.store.version("default"), None)
        return await real_apply(plan)

    kg.store.apply = taken_over  # type: ignore[method-assign]
    with pytest.raises(LeaseLostError):
        await kg.pipeline.complete(node, "w", extracted)
    assert len(plans) == 1  # refused for the lease, not re-planned as a conflict
    nodes = {n.uuid: n for n in await episodes_of(kg, "default")}
    assert nodes[first.uuid].status is EpisodeStatus.ingested
    assert nodes[second.uuid].status is EpisodeStatus.processing
    assert nodes[second.uuid].lease_owner == "z"
    cited = {u for f in await kg.history(limit=1000) for u in f.edge.episodes}
    assert first.uuid in cited and second.uuid not in cited
