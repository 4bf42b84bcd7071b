"""Rollback: undo an episode as if it had never been ingested, at every valid and known time."""

from __future__ import annotations

import itertools
import os
from collections.abc import Awaitable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kg import KG, InputError
from tests.conftest import Backend, add, examples, fact, objects, open_test_kg, t

_groups = itertools.count()
GRID = [t(y, 7) for y in range(2014, 2027)]
# Both sides of every start and end the property's episodes can give (January 1st).
BOUNDARIES = [p for y in range(2014, 2030) for p in (t(y) - timedelta(microseconds=1), t(y))]


async def view(
    kg: KG, group: str = "default", known_at: datetime | None = None, grid: list[datetime] = GRID
) -> list[list[str]]:
    """Every (subject, predicate, object) true at each grid time, as known at `known_at`."""
    out = []
    for at in grid:
        facts = await kg.facts(
            group_id=group, valid_at=at, known_at=known_at, include_contested=True
        )
        out.append(sorted(f"{f.subject} {f.predicate} {f.object} {f.edge.status}" for f in facts))
    return out


async def trusted_history(kg: KG) -> None:
    await add(kg, t(2015), ("Alice", "LIVES_IN", "Seoul"), ("Alice", "WORKS_AT", "Naver"))
    await add(kg, t(2018), ("Bob", "LIVES_IN", "Daegu"), ("Alice", "KNOWS", "Bob"))
    await add(kg, t(2021), ("Alice", "WORKS_AT", "Kakao"))


async def test_poisoned_episode_is_undone_at_every_time(kg: KG) -> None:
    await trusted_history(kg)
    before_now = await view(kg)
    [seoul] = await kg.facts(subject="Alice", predicate="LIVES_IN")
    mark = kg.clock.now()
    poison = await add(
        kg,
        t(2022),
        ("Alice", "LIVES_IN", "Pyongyang"),
        ("Bob", "LIVES_IN", "Moon Base"),
        ("Alice", "WORKS_AT", "Evil Corp"),
        ("Alice", "KNOWS", "Mallory"),
        source_description="https://evil.example/page",
    )
    assert poison.summary.facts_closed == 3
    await add(kg, t(2023), ("Alice", "KNOWS", "Carol"))  # trusted, after the poison

    plan = await kg.rollback(poison.episode_uuid)  # dry run by default
    assert not plan.applied
    assert {c.object for c in plan.removed} >= {"Pyongyang", "Moon Base", "Evil Corp", "Mallory"}
    assert {c.object for c in plan.restored} == {"Seoul", "Daegu", "Kakao"}
    assert (await view(kg))[-1] != before_now[-1]  # nothing changed yet

    done = await kg.rollback(poison.episode_uuid, dry_run=False)
    assert done.applied
    after = await view(kg)
    # Every valid time answers as before the injection, plus the later trusted fact.
    carol_from = GRID.index(t(2023, 7))
    for i, (b, a) in enumerate(zip(before_now, after, strict=True)):
        expected = sorted([*b, "Alice KNOWS Carol active"]) if i >= carol_from else b
        assert a == expected, GRID[i]
    # The re-opened fact is the same fact, under the same uuid, not a look-alike.
    [reopened] = await kg.facts(subject="Alice", predicate="LIVES_IN")
    assert reopened.edge.uuid == seoul.edge.uuid and reopened.edge.expired_at is None
    assert done.versions_reopened == 3  # Seoul, Daegu, Kakao
    # And what we knew before the injection is unchanged.
    assert await view(kg, known_at=mark) == before_now
    # Entities only the poison mentioned are gone.
    assert await kg.facts(subject="Mallory") == []
    assert (await kg.stats()).entities == 7  # Alice Bob Seoul Naver Daegu Kakao Carol


async def test_rollback_twice_is_a_no_op(kg: KG) -> None:
    await trusted_history(kg)
    bad = await add(kg, t(2022), ("Alice", "LIVES_IN", "Busan"))
    await kg.rollback(bad.episode_uuid, dry_run=False)
    state = await view(kg)
    stats = await kg.stats()
    again = await kg.rollback(bad.episode_uuid, dry_run=False)
    assert again.noop and again.already_rolled_back == [bad.episode_uuid]
    assert await view(kg) == state
    assert await kg.stats() == stats
    # Re-sending the rolled-back episode does not bring it back by accident.
    resent = await add(kg, t(2022), ("Alice", "LIVES_IN", "Busan"))
    assert resent.status == "duplicate"
    assert objects(await kg.facts(subject="Alice", predicate="LIVES_IN")) == ["Seoul"]


async def test_a_fact_also_closed_by_a_later_episode_stays_closed(kg: KG) -> None:
    await add(kg, t(2015), ("Alice", "LIVES_IN", "Seoul"))
    first = await add(kg, t(2020), ("Alice", "LIVES_IN", "Busan"))
    await add(
        kg,
        t(2020),
        fact("Alice", "LIVES_IN", "Busan", "2020-01-01T00:00:00Z"),
        source_description="second report",
    )
    await kg.rollback(first.episode_uuid, dry_run=False)
    # The second report still moves Alice to Busan in 2020: Seoul stays closed.
    assert objects(await kg.facts(subject="Alice", valid_at=t(2019))) == ["Seoul"]
    assert objects(await kg.facts(subject="Alice", valid_at=t(2021))) == ["Busan"]


async def test_rollback_of_a_reinforcement_keeps_the_fact(kg: KG) -> None:
    a = await add(kg, t(2015), ("Alice", "LIVES_IN", "Seoul"))
    b = await add(kg, t(2016), ("Alice", "LIVES_IN", "Seoul"))
    report = await kg.rollback(b.episode_uuid, dry_run=False)
    assert report.removed == report.restored == []
    [f] = await kg.facts(subject="Alice")
    assert f.edge.episodes == [a.episode_uuid]


async def test_rollback_by_source(kg: KG) -> None:
    await trusted_history(kg)
    clean = await view(kg)
    for year in (2022, 2023):
        await add(
            kg,
            t(year),
            ("Alice", "LIVES_IN", f"Fake {year}"),
            channel="user",
            source_description="https://evil.example/page",
        )
    report = await kg.rollback_source("https://evil.example/page", dry_run=False)
    assert len(report.episodes) == 2
    assert await view(kg) == clean
    nothing = await kg.rollback_source("https://evil.example/page", dry_run=False)
    assert nothing.noop


async def test_unknown_episode_is_an_error(kg: KG) -> None:
    with pytest.raises(InputError, match="no episode 'nope'"):
        await kg.rollback("nope")


async def test_why_lists_versions_and_episodes(kg: KG) -> None:
    first = await add(kg, t(2015), ("Alice", "LIVES_IN", "Seoul"), source_description="chat 1")
    move = await add(kg, t(2020), ("Alice", "LIVES_IN", "Busan"), source_description="chat 2")
    seoul = first.summary.edges_added[0]
    why = await kg.why(seoul)
    assert [(v.object, v.edge.invalid_at, v.edge.expired_at is None) for v in why.versions] == [
        ("Seoul", None, False),
        ("Seoul", t(2020), True),
    ]
    assert {e.source_description for e in why.episodes} == {"chat 1", "chat 2"}
    assert why.versions[1].edge.invalidated_by == move.episode_uuid
    with pytest.raises(InputError, match="no fact"):
        await kg.why("missing")


async def test_the_audit_log_records_rollbacks_and_closures(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Busan"))
    bad = await add(kg, t(2022), ("Alice", "KNOWS", "Mallory"))
    await kg.rollback(bad.episode_uuid)  # dry run: not logged
    assert await kg.log() == []
    await kg.rollback(bad.episode_uuid, dry_run=False)
    [event] = await kg.log()
    assert event.kind == "rollback" and event.episodes == [bad.episode_uuid]
    move = await add(kg, t(2023), ("Alice", "LIVES_IN", "Daegu"))
    newest, older = await kg.log()
    assert newest.kind == "closure" and newest.episodes == [move.episode_uuid]
    assert newest.detail.startswith("Alice LIVES_IN Busan: true until 2023-01-01")
    assert older == event
    assert [e.kind for e in await kg.log(closures=False)] == ["rollback"]


# -- property: rollback of k == never ingesting k ---------------------------------------------

EPISODES = st.lists(
    st.tuples(
        st.sampled_from(["Alice", "Bob"]),
        st.sampled_from(["LIVES_IN", "KNOWS"]),
        st.sampled_from(["Seoul", "Busan", "Daegu"]),
        st.integers(2014, 2026),
        st.sampled_from(["user", "tool", "document"]),
        st.booleans(),  # with an explicit end?
    ),
    min_size=2,
    max_size=7,
)


async def ingest(
    kg: KG, group: str, episodes: list[tuple[str, str, str, int, str, bool]]
) -> list[tuple[str, datetime]]:
    out = []
    for i, (s, p, o, year, channel, ends) in enumerate(episodes):
        end = t(year + 2) if ends else None
        r = await add(
            kg,
            t(2030, 1, 1 + i),
            fact(s, p, o, t(year), end),
            group_id=group,
            channel=channel,
            name=f"{i}",
        )
        out.append((r.episode_uuid, kg.clock.now()))
    return out


async def rollback_equals_never_ingesting(
    kg: KG, episodes: list[tuple[str, str, str, int, str, bool]], k: int
) -> None:
    def seen(group: str, known_at: datetime | None = None) -> Awaitable[list[list[str]]]:
        return view(kg, group, known_at, grid=BOUNDARIES)

    k %= len(episodes)
    a, b = f"a{next(_groups)}", f"b{next(_groups)}"
    marks_a = await ingest(kg, a, episodes)
    marks_b = await ingest(kg, b, episodes[:k] + episodes[k + 1 :])
    await kg.rollback(marks_a[k][0], group_id=a, dry_run=False)

    assert await seen(a) == await seen(b)
    others_a = [m for j, m in enumerate(marks_a) if j != k]
    for (_, known_a), (_, known_b) in zip(others_a, marks_b, strict=True):
        assert await seen(a, known_a) == await seen(b, known_b)
    # Twice is a no-op.
    state = await seen(a)
    assert (await kg.rollback(marks_a[k][0], group_id=a, dry_run=False)).noop
    assert await seen(a) == state


# In memory (tests.memory_store): 500 sequences (KG_THOROUGH=1: 5000); on each real store: 5
# (300).
@examples(5000 if os.environ.get("KG_THOROUGH") else 500)
@given(episodes=EPISODES, k=st.integers(0, 6))
async def test_rollback_equals_never_ingesting(
    mem: KG, episodes: list[tuple[str, str, str, int, str, bool]], k: int
) -> None:
    await rollback_equals_never_ingesting(mem, episodes, k)


@examples(300 if os.environ.get("KG_THOROUGH") else 5)
@given(episodes=EPISODES, k=st.integers(0, 6))
async def test_rollback_equals_never_ingesting_live(
    kg: KG, episodes: list[tuple[str, str, str, int, str, bool]], k: int
) -> None:
    await rollback_equals_never_ingesting(kg, episodes, k)


async def test_replay_of_an_untouched_group_is_identical(kg: KG) -> None:
    await trusted_history(kg)
    bad = await add(kg, t(2022), ("Alice", "LIVES_IN", "Busan"))
    await kg.rollback(bad.episode_uuid, dry_run=False)
    report = await kg.replay()
    assert report.identical and report.episodes == 3
    assert report.only_in_graph == report.only_in_replay == []


async def test_replay_after_an_ontology_change_shows_and_applies_the_difference(
    backend: Backend, home: Path
) -> None:
    from kg import Ontology, Predicate

    async with await open_test_kg(backend, home) as kg:
        await add(kg, t(2015), ("Alice", "LIVES_IN", "Seoul"))
        await add(kg, t(2020), ("Alice", "LIVES_IN", "Busan"))
    many = Ontology(predicates=[Predicate(name="LIVES_IN", cardinality="many")])
    async with await open_test_kg(backend, home, ontology=many) as kg:
        report = await kg.replay()
        assert not report.identical
        assert {c.object for c in report.only_in_replay} == {"Seoul"}  # no longer closed
        assert objects(await kg.facts(subject="Alice")) == ["Busan"]  # dry run
        await kg.replay(dry_run=False)
        assert objects(await kg.facts(subject="Alice")) == ["Busan", "Seoul"]
        assert (await kg.replay()).identical


async def test_an_episode_that_cannot_be_replayed_is_a_clear_error(kg: KG) -> None:
    r = await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    # As an LLM-extracted episode would look today: text content, no stored extraction.
    await kg.store.raw_query(
        "default",
        "MATCH (ep:Episodic {uuid: $u}) SET ep.source = 'text', ep.content = 'hello'",
        {"u": r.episode_uuid},
        write=True,
    )
    with pytest.raises(InputError, match="without a stored extraction"):
        await kg.rollback(r.episode_uuid)
    assert objects(await kg.facts(subject="Alice")) == ["Seoul"]
