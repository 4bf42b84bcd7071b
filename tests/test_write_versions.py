"""Writes are checked against the group version their plan read (kg.versioned): a writer that
cuts in between another's reads and its write makes that write re-plan, never corrupt.

These run in one process on the embedded store, with the cut-in placed exactly; the race of
real processes on an external server is tests/test_many_writers.py.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kg import KG
from kg import pipeline as pipeline_module
from kg import versioned as versioned_module
from kg.errors import InputError, StoreError, WriteConflictError
from kg.ingest.llm import ScriptedLLM
from kg.ingest.structured import plan_structured_episode
from kg.schemas import DEFAULT_ONTOLOGY, Episode
from kg.schemas.plan import GroupVersion
from kg.times import utcnow
from kg.versioned import retrying
from tests.conftest import add, fact, objects, t

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import many_writers


class CutIn:
    """The store, except that just after a plan first reads live edges (after its version was
    read, before its write), `other` runs to completion: another writer cutting in, which
    makes what the plan read stale. A structured episode reads them in its one planning
    read; an extracted one by `live_edges`."""

    def __init__(self, store: Any, other: Callable[[], Awaitable[Any]]) -> None:
        self._store, self._other, self.cut = store, other, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def _after(self, read: Any) -> Any:
        if not self.cut:
            self.cut += 1
            await self._other()
        return read

    async def live_edges(self, group_id: str, keys: Any) -> Any:
        return await self._after(await self._store.live_edges(group_id, keys))

    async def planning_reads(self, group_id: str, names: Any) -> Any:
        return await self._after(await self._store.planning_reads(group_id, names))


async def test_a_writer_that_cuts_in_makes_the_other_replan(kg: KG) -> None:
    await add(kg, t(2000), ("Alice", "LIVES_IN", "Seoul"))
    other = KG(kg.store)  # a second KG object on the same server: its own in-process lock
    cutter = CutIn(kg.store, lambda: add(other, t(2010), ("Alice", "LIVES_IN", "Busan")))
    late = await add(KG(cutter), t(2020), ("Alice", "LIVES_IN", "Daegu"))  # type: ignore[arg-type]
    assert objects(await kg.facts(subject="Alice")) == ["Daegu"]  # one current value
    assert cutter.cut == 1 and late.attempts == 2
    for year, city in ((2005, "Seoul"), (2015, "Busan"), (2025, "Daegu")):
        assert objects(await kg.facts(subject="Alice", valid_at=t(year))) == [city]
    assert (await kg.replay()).identical  # the graph is what its own log gives
    entities = await kg.store.raw_query(
        "default", "MATCH (n:Entity) RETURN n.name_key AS k, count(n) AS c"
    )
    assert all(r["c"] == 1 for r in entities)


def count_round_trips(kg: KG, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The store's reads and atomic writes from here on, in order, by kind."""
    calls: list[str] = []
    write = "_execute" if hasattr(kg.store, "_execute") else "execute"  # FalkorDB's, inside
    for name, kind in (("_read", "read"), (write, "write")):
        real = getattr(kg.store, name)

        async def counted(*args: Any, _real: Any = real, _kind: str = kind, **kw: Any) -> Any:
            calls.append(_kind)
            return await _real(*args, **kw)

        monkeypatch.setattr(kg.store, name, counted)
    return calls


async def test_a_structured_episode_is_one_read_and_one_write(
    kg: KG, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its version, duplicate check, entities and timelines are one read; the version its
    own last write made current needs no reading (bulk ingest: issue 16, item 6)."""
    await add(kg, t(2000), ("Alice", "LIVES_IN", "Seoul"), ("Alice", "KNOWS", "Bob"))
    calls = count_round_trips(kg, monkeypatch)
    r = await add(kg, t(2010), ("Alice", "LIVES_IN", "Busan"), ("Alice", "KNOWS", "Bob"))
    assert (r.summary.facts_added, r.summary.facts_closed, r.summary.facts_reinforced) == (1, 1, 1)
    assert calls == ["read", "write"]
    again = await add(kg, t(2010), ("Alice", "LIVES_IN", "Busan"), ("Alice", "KNOWS", "Bob"))
    assert again.status == "duplicate" and calls == ["read", "write", "read"]
    # Another writer moved the group since: the plan made at the remembered version is
    # refused, nothing written, and made again at the version read afresh.
    await add(KG(kg.store), t(2020), ("Alice", "LIVES_IN", "Daegu"))
    calls.clear()
    late = await add(kg, t(2030), ("Alice", "LIVES_IN", "Jeju"))
    assert calls == ["read", "write", "read", "read", "write"] and late.attempts == 1
    for year, city in ((2005, "Seoul"), (2015, "Busan"), (2025, "Daegu"), (2035, "Jeju")):
        at = await kg.facts(subject="Alice", predicate="LIVES_IN", valid_at=t(year))
        assert objects(at) == [city]
    assert (await kg.replay()).identical


def versions(facts: list[Any]) -> list[tuple[Any, ...]]:
    """A group's history with what differs between two identical graphs (uuids, transaction
    times) left out."""
    return sorted(
        (
            f.subject,
            f.predicate,
            f.object,
            f.edge.valid_at.isoformat(),
            f.edge.invalid_at.isoformat() if f.edge.invalid_at else "",
            f.edge.status.value,
            f.edge.expired_at is None,
            len(f.edge.episodes),
        )
        for f in facts
    )


def mixed_episodes(n: int, seed: int) -> list[dict[str, Any]]:
    """Structured episodes of three people in no valid-time order: late facts, closures,
    restatements and ends, on few timelines (so episodes of one batch meet on them)."""
    rng = random.Random(seed)
    names = ["Ann", "Bo", "Cy", "Seoul", "Busan", "Jeju"]
    episodes = []
    for i in range(n):
        rows = []
        for _ in range(3):
            start = t(2000) + timedelta(days=rng.randrange(7000))  # in no order: late facts
            end = start + timedelta(days=rng.randrange(1, 900)) if rng.random() < 0.2 else None
            rows.append(
                fact(
                    rng.choice(names[:3]),
                    rng.choice(["LIVES_IN", "WORKS_AT", "KNOWS"]),
                    rng.choice(names),
                    start,
                    end,
                )
            )
        episodes.append(
            {"source": "facts", "reference_time": t(2021) + timedelta(days=i), "facts": rows}
        )
    return episodes


async def mentions(kg: KG, group: str) -> list[tuple[str, ...]]:
    """Every MENTIONS edge as (episode content hash, entity name key, whether its uuid and
    time are the episode's own, as one episode's write makes them, its group)."""
    rows = await kg.store.raw_query(  # type: ignore[attr-defined]
        group,
        "MATCH (ep:Episodic)-[m:MENTIONS]->(n:Entity) WHERE ep.group_id = $group "
        "RETURN ep.content_hash AS h, n.name_key AS k, m.uuid = ep.uuid + ':' + n.uuid AS "
        "own_uuid, m.created_at = ep.created_at AS own_time, m.group_id AS g",
        {"group": group},
    )
    return sorted(
        (r["h"], r["k"], str(r["own_uuid"]), str(r["own_time"]), r["g"] == group) for r in rows
    )


async def same_as_one_by_one(kg: KG, group: str, episodes: list[dict[str, Any]]) -> None:
    for e in sorted(episodes, key=lambda e: e["reference_time"]):
        await kg.add_episode(**{**e, "group_id": f"{group}-one"})
    bulk = await kg.history(group_id=group, limit=10_000)
    assert versions(bulk) == versions(await kg.history(group_id=f"{group}-one", limit=10_000))
    assert any(f.edge.invalid_at is not None for f in bulk) and len(bulk) > 100
    assert (await kg.replay(group_id=group)).identical
    found = await mentions(kg, group)
    assert found == await mentions(kg, f"{group}-one") and len(found) > 100
    assert all(m[2:] == ("True", "True", True) for m in found), found[:3]


async def test_add_episodes_writes_a_batch_of_structured_episodes_as_one_write(
    kg: KG, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Consecutive structured episodes are planned together, each against what the ones
    before it write, and written as one atomic unit (one query in one transaction on both
    backends), in which the next batch's planning read rides. Late facts, closures,
    restatements and duplicates (inside a batch) give the graph one-by-one ingest gives."""
    monkeypatch.setattr(pipeline_module, "BULK_BATCH", 10)
    episodes = mixed_episodes(40, seed=5)
    episodes += episodes[5:8]  # duplicates
    await kg.store.ensure_schema("bulk")  # once per store (Neo4j reads for unkeyed episodes)
    calls = count_round_trips(kg, monkeypatch)
    r = await kg.add_episodes([{**e, "group_id": "bulk"} for e in episodes])
    assert r.added == 40 and r.duplicate == 3
    # 43 episodes in batches of 10; reads: the new group's version and the first batch's.
    assert calls == ["read", "read"] + ["write"] * 5, calls
    monkeypatch.undo()
    await same_as_one_by_one(kg, "bulk", episodes)


async def test_an_idempotency_key_met_again_in_a_batch_is_a_duplicate(kg: KG) -> None:
    """The same turns of a session are one episode, whatever the text: inside one batch as
    across calls (its first version is stored, the second reported as a duplicate)."""
    first = {
        "source": "facts",
        "reference_time": t(2021),
        "session_id": "s1",
        "turns": (0, 1),
        "facts": [fact("Ann", "LIVES_IN", "Seoul")],
    }
    again = {**first, "reference_time": t(2022), "facts": [fact("Ann", "LIVES_IN", "Jeju")]}
    r = await kg.add_episodes([first, again])
    assert [x.status for x in r.results] == ["added", "duplicate"]
    assert r.results[1].episode_uuid == r.results[0].episode_uuid
    assert objects(await kg.facts(subject="Ann")) == ["Seoul"]


async def test_a_batch_another_writer_cuts_into_is_planned_again(kg: KG) -> None:
    episodes = [{**e, "group_id": "cut"} for e in mixed_episodes(30, seed=7)]
    intruder = {
        "source": "facts",
        "reference_time": t(2020),
        "group_id": "cut",
        "facts": [fact("Ann", "LIVES_IN", "Jeju", t(2001))],
    }
    other = KG(kg.store)
    cutter = CutIn(kg.store, lambda: other.add_episode(**intruder))
    r = await KG(cutter).add_episodes(episodes)  # type: ignore[arg-type]
    assert cutter.cut == 1 and r.added == 30 and {x.attempts for x in r.results} == {2}
    await same_as_one_by_one(kg, "cut", [intruder, *episodes])


async def test_a_batch_the_store_refuses_goes_one_by_one(
    kg: KG, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The episodes before the one the store refuses are written, and its error is raised
    as one-by-one ingest raises it."""
    episodes = [{**e, "group_id": "refused"} for e in mixed_episodes(12, seed=9)]
    real = kg.store.apply_many

    async def refuse(plans: list[Any], names: Any) -> Any:
        # The batch of 12, then the eighth episode's own write.
        if len(plans) > 1 or plans[0].episode.valid_at == episodes[7]["reference_time"]:
            raise StoreError("refused")
        return await real(plans, names)

    monkeypatch.setattr(kg.store, "apply_many", refuse)
    with pytest.raises(StoreError, match="refused"):
        await kg.add_episodes(episodes)
    stored = await kg.store.find_episodes("refused", None, None)
    assert sorted(e.valid_at for e in stored) == [e["reference_time"] for e in episodes[:7]]


async def test_a_conflict_replans_without_asking_the_llm_again(home: Path) -> None:
    answer = json.dumps(
        {
            "entities": [],
            "facts": [
                {
                    "subject": "Minji",
                    "predicate": "LIVES_IN",
                    "object": "Busan",
                    "fact": "moved",
                    "quote": "I moved to Busan",
                }
            ],
        }
    )
    llm = ScriptedLLM([answer])  # one reply: a second extraction would fail the episode
    async with await KG.open(home=home, llm=llm) as kg:
        await add(kg, t(2020), ("Minji", "LIVES_IN", "Seoul"))
        other = KG(kg.store)
        cutter = CutIn(kg.store, lambda: add(other, t(2022), ("Minji", "LIVES_IN", "Daegu")))
        talker = KG(cutter, llm=llm)  # type: ignore[arg-type]
        r = await talker.add_episode(
            source="message", content="Minji: I moved to Busan.", reference_time=t(2024)
        )
        assert cutter.cut == 1 and r.attempts == 2 and r.summary.llm_calls == 1
        assert objects(await kg.facts(subject="Minji")) == ["Busan"]
        assert objects(await kg.facts(subject="Minji", valid_at=t(2023))) == ["Daegu"]


async def test_a_stale_plan_writes_nothing(kg: KG) -> None:
    store = kg.store
    await add(kg, t(2000), ("Alice", "LIVES_IN", "Seoul"))
    base = await store.version("default")
    plans = []
    for city in ("Busan", "Daegu"):
        episode = Episode(
            source="facts", reference_time=t(2010), facts=[fact("Alice", "LIVES_IN", city)]
        )
        plan, _ = await plan_structured_episode(episode, store, DEFAULT_ONTOLOGY, utcnow())
        plan.base = base
        plans.append(plan)
    after = await store.apply(plans[0])
    assert after.token != base.token and after.writes == base.writes + 1
    before = await kg.stats()
    with pytest.raises(WriteConflictError, match="nothing written"):
        await store.apply(plans[1])
    assert await kg.stats() == before
    assert await store.episodes("default", [plans[1].episode.uuid]) == []
    assert await store.version("default") == after


async def test_many_kg_objects_racing_in_one_process_match_one_writer(kg: KG) -> None:
    episodes = many_writers.scenario_episodes(48, seed=3)
    writers = [KG(kg.store) for _ in range(4)]

    async def run(w: KG, mine: list[dict[str, Any]]) -> list[int]:
        return [(await w.add_episode(**ep, group_id="raced")).attempts for ep in mine]

    attempts = await asyncio.gather(*(run(w, episodes[i::4]) for i, w in enumerate(writers)))
    stored = sorted(await kg.store.find_episodes("raced", None, None), key=lambda e: e.created_at)
    by_name = {ep["name"]: ep for ep in episodes}
    for e in stored:  # one writer, in the raced group's commit order
        await kg.add_episode(**{**by_name[e.name], "group_id": "one"})
    trial = many_writers.Trial(scenario="ingest", writers=4, episodes=48)
    await many_writers.audit(kg, "raced", "one", trial)
    assert trial.asof_probes > 100 and trial.anomalies == 0, many_writers.row(trial)
    assert max(a for per in attempts for a in per) > 1  # they did race


async def test_transaction_time_follows_the_group_not_a_lagging_clock(kg: KG) -> None:
    ahead = KG(kg.store)
    ahead.clock.advance_past(utcnow() + timedelta(hours=1))  # another machine, clock ahead
    first = await add(ahead, t(2000), ("Alice", "LIVES_IN", "Seoul"))
    second = await add(kg, t(2010), ("Alice", "LIVES_IN", "Busan"))
    times = {e.uuid: e.created_at for e in await kg.store.find_episodes("default", None, None)}
    assert times[second.episode_uuid] > times[first.episode_uuid] > utcnow()
    assert (await kg.replay()).identical


async def test_an_overtaken_writer_takes_the_lease_then_releases_it(
    kg: KG, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(versioned_module, "MAX_PAUSE", 0.0)
    store = kg.store
    await add(kg, t(2000), ("Alice", "LIVES_IN", "Seoul"))
    holds: list[str | None] = []

    async def attempt(base: GroupVersion) -> str:
        holds.append(base.hold)
        if base.hold is None:  # not yet holding the lease: someone else's write lands first
            await store.set_hold("default", None, None)
        await store.set_hold("default", base, base.hold)  # this attempt's own (fenced) write
        return "done"

    result, n = await retrying(store, kg.clock, "default", attempt)
    assert result == "done" and n == versioned_module.LEASE_AFTER + 1  # plans made
    assert holds[:-1] == [None] * versioned_module.LEASE_AFTER
    assert (holds[-1] or "").startswith("lease ")  # its last attempt could not be overtaken
    assert (await store.version("default")).hold is None  # released


async def test_retries_are_bounded_and_the_error_says_nothing_was_written(
    kg: KG, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(versioned_module, "MAX_PAUSE", 0.0)
    await add(kg, t(2000), ("Alice", "LIVES_IN", "Seoul"))
    calls = 0

    async def always_overtaken(base: GroupVersion) -> None:
        nonlocal calls
        calls += 1
        raise WriteConflictError("overtaken")

    with pytest.raises(WriteConflictError, match=r"gave up after 10 plans .* nothing was written"):
        await retrying(kg.store, kg.clock, "default", always_overtaken)
    assert calls == versioned_module.ATTEMPTS == 10
    assert (await kg.store.version("default")).hold is None  # the lease it took is released


async def test_a_held_group_makes_writers_wait_then_say_why(
    kg: KG, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(versioned_module, "MAX_PAUSE", 0.01)
    monkeypatch.setattr(versioned_module, "HOLD_WAIT_SECONDS", 0.3)
    await add(kg, t(2000), ("Alice", "LIVES_IN", "Seoul"))
    v = await kg.store.set_hold("default", await kg.store.version("default"), "import")
    with pytest.raises(WriteConflictError, match=r"held by another operation \(import\)"):
        await add(kg, t(2010), ("Alice", "LIVES_IN", "Busan"))
    # A lease whose writer died lapses: it blocks nobody.
    lapsed = f"lease dead until {(utcnow() - timedelta(seconds=1)).isoformat()}"
    await kg.store.set_hold("default", v, lapsed)
    assert (await add(kg, t(2010), ("Alice", "LIVES_IN", "Busan"))).attempts == 1


async def test_an_import_never_lands_in_a_group_another_writer_created(
    kg: KG, monkeypatch: pytest.MonkeyPatch
) -> None:
    await add(kg, t(2000), ("Alice", "LIVES_IN", "Seoul"))
    lines = [line async for line in kg.export_lines()]
    await add(kg, t(2000), ("Bob", "LIVES_IN", "Busan"), group_id="taken")

    async def no(group_id: str) -> bool:  # as if the other writer came just after the check
        return False

    monkeypatch.setattr(kg.store, "has_group", no)
    with pytest.raises(InputError, match="created by another writer"):
        await kg.import_lines(lines, into="taken")
    monkeypatch.undo()
    assert objects(await kg.facts(group_id="taken")) == ["Busan"]  # not dropped, not merged


async def test_a_group_erased_elsewhere_gets_its_indexes_back(falkor_kg: KG) -> None:
    """Another process erased the group: this one's cache still says its indexes exist
    (FalkorDB: a graph per group, with its own indexes)."""
    kg = falkor_kg
    await add(kg, t(2000), ("Alice", "LIVES_IN", "Seoul"))
    await kg.store.client.connection.execute_command("GRAPH.DELETE", "default")
    await add(kg, t(2010), ("Alice", "LIVES_IN", "Busan"))
    await add(kg, t(2010), ("Alice", "LIVES_IN", "Busan"), group_id="fresh")
    store: Any = kg.store
    assert await store.index_statuses("default") == await store.index_statuses("fresh")
    assert [h.fact.object for h in (await kg.search("Busan")).facts] == ["Busan"]
