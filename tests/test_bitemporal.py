"""Supersede, multi-valued facts, out-of-order arrivals and as-of queries on both time axes."""

from __future__ import annotations

from kg import KG
from kg.ingest.timeline import ENDED
from tests.conftest import add, fact, objects, t


async def test_single_valued_supersede_closes_old_fact_with_provenance(kg: KG) -> None:
    first = await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    second = await add(kg, t(2023, 5), ("Alice", "lives in", "Busan"))

    assert second.summary.facts_closed == 1
    now = await kg.facts(subject="alice")
    assert objects(now) == ["Busan"]

    versions = await kg.history(subject="Alice", predicate="LIVES_IN")
    seoul = [v.edge for v in versions if v.object == "Seoul"]
    retired = next(v for v in seoul if v.expired_at is not None)
    closed = next(v for v in seoul if v.expired_at is None)
    # The original belief is retired when the move is learned, never edited...
    assert retired.invalid_at is None
    assert retired.expired_at == closed.created_at
    # ...and the closed copy records when it stopped being true and who closed it.
    assert closed.invalid_at == t(2023, 5)
    assert closed.invalidated_by == second.episode_uuid
    assert closed.invalidated_edge == second.summary.edges_added[0]
    assert closed.invalidation_reason == "superseded: a new value of a single-valued predicate"
    assert closed.supersedes == retired.uuid
    assert closed.fact_uuid == retired.fact_uuid
    assert closed.episodes == [first.episode_uuid]


async def test_as_of_valid_time(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    await add(kg, t(2023, 5), ("Alice", "LIVES_IN", "Busan"))

    assert objects(await kg.facts(subject="Alice", valid_at=t(2019))) == []
    assert objects(await kg.facts(subject="Alice", valid_at=t(2021, 3))) == ["Seoul"]
    assert objects(await kg.facts(subject="Alice", valid_at=t(2023, 4, 30))) == ["Seoul"]
    # The boundary belongs to the new fact: intervals are [valid_at, invalid_at).
    assert objects(await kg.facts(subject="Alice", valid_at=t(2023, 5))) == ["Busan"]


async def test_as_of_transaction_time_answers_what_we_knew_then(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    before = kg.clock.now()
    await add(kg, t(2023, 5), ("Alice", "LIVES_IN", "Busan"))
    after = kg.clock.now()

    # Asked about 2024: before we learned of the move we believed Seoul; now we know Busan.
    assert objects(await kg.facts(subject="Alice", valid_at=t(2024), known_at=before)) == ["Seoul"]
    assert objects(await kg.facts(subject="Alice", valid_at=t(2024), known_at=after)) == ["Busan"]
    # Asked about 2021, the answer is Seoul at both transaction times.
    for known in (before, after):
        assert objects(await kg.facts(subject="Alice", valid_at=t(2021), known_at=known)) == [
            "Seoul"
        ]


async def test_multi_valued_predicates_are_kept_side_by_side(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "KNOWS", "Bob"))
    result = await add(kg, t(2021), ("Alice", "KNOWS", "Carol"))
    assert result.summary.facts_closed == 0
    assert objects(await kg.facts(subject="Alice", predicate="KNOWS")) == ["Bob", "Carol"]
    assert objects(await kg.facts(subject="Alice", valid_at=t(2020, 6))) == ["Bob"]


async def test_restating_a_current_fact_reinforces_it(kg: KG) -> None:
    first = await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    again = await add(kg, t(2022), ("Alice", "LIVES_IN", "Seoul"))
    assert again.summary.facts_reinforced == 1
    assert again.summary.facts_added == 0
    [fact] = await kg.facts(subject="Alice")
    assert fact.edge.episodes == [first.episode_uuid, again.episode_uuid]
    assert len(await kg.history(subject="Alice")) == 1


async def test_late_older_fact_is_history_and_closes_nothing_current(kg: KG) -> None:
    await add(kg, t(2022), ("Alice", "LIVES_IN", "Busan"))
    late = await add(
        kg,
        t(2024),
        fact("Alice", "LIVES_IN", "Daegu", "2018-01-01T00:00:00Z"),
    )
    assert late.summary.facts_closed == 0
    assert objects(await kg.facts(subject="Alice")) == ["Busan"]
    assert objects(await kg.facts(subject="Alice", valid_at=t(2019))) == ["Daegu"]
    [daegu] = [f for f in await kg.history(subject="Alice") if f.object == "Daegu"]
    # It ends where the already-known next value starts.
    assert daegu.edge.invalid_at == t(2022)


async def test_late_fact_inside_a_historical_interval_splits_it(kg: KG) -> None:
    await add(kg, t(2015), ("Alice", "LIVES_IN", "Seoul"))
    await add(kg, t(2022), ("Alice", "LIVES_IN", "Busan"))
    late = await add(
        kg,
        t(2024),
        fact("Alice", "LIVES_IN", "Daegu", "2018-06-01T00:00:00Z"),
    )
    assert late.summary.facts_closed == 1  # the historical Seoul interval, not current Busan
    assert objects(await kg.facts(subject="Alice", valid_at=t(2016))) == ["Seoul"]
    assert objects(await kg.facts(subject="Alice", valid_at=t(2019))) == ["Daegu"]
    assert objects(await kg.facts(subject="Alice", valid_at=t(2023))) == ["Busan"]
    assert objects(await kg.facts(subject="Alice")) == ["Busan"]


async def test_explicit_invalid_at_ends_a_stored_fact(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "MEMBER_OF", "Chess Club"))
    end = await add(
        kg,
        t(2023),
        fact("Alice", "MEMBER_OF", "Chess Club", "2021-01-01T00:00:00Z", "2022-01-01T00:00:00Z"),
    )
    assert end.summary.facts_closed == 1
    [closed] = [v.edge for v in await kg.history(subject="Alice") if v.edge.invalidated_by]
    assert closed.invalidation_reason == ENDED
    assert objects(await kg.facts(subject="Alice")) == []
    assert objects(await kg.facts(subject="Alice", valid_at=t(2021, 6))) == ["Chess Club"]


async def test_facts_given_with_intervals_answer_inclusive_overlaps(kg: KG) -> None:
    await add(
        kg,
        t(2024),
        fact("Pat", "isAffiliatedTo", "Reform", "1999-01-01T00:00:00Z", "2003-01-01T00:00:00Z"),
        fact("Pat", "isAffiliatedTo", "Republican", "1999-01-01T00:00:00Z", "2005-01-01T00:00:00Z"),
    )
    assert objects(await kg.facts(subject="Pat", valid_at=t(2002, 7))) == ["Reform", "Republican"]
    assert objects(await kg.facts(subject="Pat", valid_at=t(2004, 7))) == ["Republican"]
    assert objects(await kg.facts(subject="Pat", predicate="IS_AFFILIATED_TO")) == []


async def test_one_episode_with_a_whole_timeline(kg: KG) -> None:
    # Given out of order within one episode: the timeline is still right.
    await add(
        kg,
        t(2024),
        fact("Bo", "WORKS_AT", "C", "2022-01-01T00:00:00Z"),
        fact("Bo", "WORKS_AT", "A", "2010-01-01T00:00:00Z"),
        fact("Bo", "WORKS_AT", "B", "2015-01-01T00:00:00Z"),
    )
    assert objects(await kg.facts(subject="Bo", valid_at=t(2012))) == ["A"]
    assert objects(await kg.facts(subject="Bo", valid_at=t(2016))) == ["B"]
    assert objects(await kg.facts(subject="Bo")) == ["C"]
    # Nothing was stored yet, so nothing needed retiring: three versions, one per value.
    assert len(await kg.history(subject="Bo")) == 3


async def test_closing_before_a_restatement_lets_the_fact_resume(kg: KG) -> None:
    # Found by the order-independence property: Seoul from 2000, Seoul again observed in 2002,
    # then a late report of Busan from 2001. Seoul must resume in 2002.
    await add(
        kg,
        t(2030),
        fact("Alice", "LIVES_IN", "Seoul", "2000-01-01T00:00:00Z"),
    )
    restated = await add(
        kg,
        t(2031),
        fact("Alice", "LIVES_IN", "Seoul", "2002-01-01T00:00:00Z"),
    )
    await add(
        kg,
        t(2032),
        fact("Alice", "LIVES_IN", "Busan", "2001-01-01T00:00:00Z"),
    )
    assert objects(await kg.facts(subject="Alice", valid_at=t(2000, 6))) == ["Seoul"]
    assert objects(await kg.facts(subject="Alice", valid_at=t(2001, 6))) == ["Busan"]
    [resumed] = await kg.facts(subject="Alice", valid_at=t(2003))
    assert resumed.object == "Seoul"
    assert resumed.edge.valid_at == t(2002)
    assert resumed.edge.episodes == [restated.episode_uuid]


async def test_as_of_holds_when_another_tool_range_indexed_the_times(kg: KG) -> None:
    """FalkorDB 4.16: after a delete, a range index returns the edge that reuses the deleted
    one's internal id for the *old* value. graphiti-core indexes every time property; kg's
    range predicates must not be served by such an index (kg.store.cypher.dialect.unindexed)."""
    await add(kg, t(2021, 3, 2), ("Minji", "LIVES_IN", "Seoul"))
    await kg.store.raw_query(
        "default",
        "CREATE INDEX FOR ()-[e:RELATES_TO]-() ON (e.valid_at, e.created_at)",
        write=True,
    )
    poison = await add(kg, t(2022, 1, 1), ("Minji", "LIVES_IN", "Jeju"))
    await kg.rollback(poison.episode_uuid, dry_run=False)  # deletes and re-creates versions
    await add(kg, t(2024, 6, 1), ("Minji", "LIVES_IN", "Busan"))
    assert objects(await kg.facts(subject="Minji", valid_at=t(2023, 3, 15))) == ["Seoul"]
    assert objects(await kg.facts(subject="Minji", valid_at=t(2021, 1, 1))) == []
    assert objects(await kg.facts(subject="Minji")) == ["Busan"]
