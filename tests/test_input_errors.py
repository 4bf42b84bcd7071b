"""Bad input gets an error naming the problem, and never a partial write."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from kg import KG, InputError, Ontology, Predicate
from tests.conftest import Backend, add, fact, objects, open_test_kg, t

HOSTILE = [
    'x"}) MATCH (n) DETACH DELETE n //',
    "Robert'); DROP TABLE students;--",
    "back\\slash\\",
    "line\nbreak\ttab",
    "부산으로 이사했다",
    "emoji 😀 and `backticks` and $param",
]


async def test_naive_datetimes_are_refused(kg: KG) -> None:
    with pytest.raises(InputError, match="timezone"):
        await kg.add_episode(
            source="facts",
            reference_time=datetime(2020, 1, 1),
            facts=[{"subject": "A", "predicate": "KNOWS", "object": "B"}],
        )
    with pytest.raises(InputError, match="timezone"):
        await kg.facts(valid_at=datetime(2020, 1, 1))
    assert (await kg.stats()).episodes == 0


@pytest.mark.parametrize("when", [2021, 1_700_000_000.5, " 1700000000 ", "1e9", "20210304"])
async def test_numbers_are_not_times(kg: KG, when: object) -> None:
    """pydantic alone would read 2021 as Unix second 2021 (1970-01-01T00:33:41Z), silently."""
    row = {"subject": "A", "predicate": "KNOWS", "object": "B", "valid_at": when}
    with pytest.raises(InputError, match="is a number, not a time: give an ISO 8601 time or date"):
        await kg.add_episode(source="facts", reference_time=t(2020), facts=[row])
    with pytest.raises(InputError, match="is a number, not a time"):
        await kg.add_episode(
            source="facts",
            reference_time=when,
            facts=[{"subject": "A", "predicate": "KNOWS", "object": "B"}],
        )
    assert (await kg.stats()).episodes == 0


async def test_interval_must_be_forward(kg: KG) -> None:
    with pytest.raises(InputError, match="must be after"):
        await add(
            kg,
            t(2020),
            fact("A", "KNOWS", "B", "2021-01-01T00:00:00Z", "2020-01-01T00:00:00Z"),
        )
    with pytest.raises(InputError, match="reference_time"):
        await add(
            kg,
            t(2020),
            fact("A", "KNOWS", "B", None, "2019-01-01T00:00:00Z"),
        )


@pytest.mark.parametrize(
    ("fact", "message"),
    [
        ({"subject": " ", "predicate": "KNOWS", "object": "B"}, "subject"),
        ({"subject": "A", "predicate": "KNOWS", "object": "B\x00"}, "NUL"),
        ({"subject": "A", "predicate": "!!!", "object": "B"}, "predicate"),
        ({"subject": "A", "predicate": "KNOWS", "object": "B", "colour": "red"}, "colour"),
        (
            {"subject": "A", "predicate": "KNOWS", "object": "B", "subject_type": "bad type"},
            "entity type",
        ),
    ],
)
async def test_malformed_facts_are_refused_and_nothing_is_written(
    kg: KG, fact: dict[str, str], message: str
) -> None:
    good = {"subject": "C", "predicate": "KNOWS", "object": "D"}
    with pytest.raises(InputError, match=message):
        await add(kg, t(2020), good, fact)
    assert (await kg.stats()).episodes == 0
    assert await kg.facts() == []


async def test_strict_ontology_rejects_unknown_predicates(backend: Backend, home: Path) -> None:
    onto = Ontology(
        name="hr", predicates=[Predicate(name="WORKS_AT", cardinality="one")], strict=True
    )
    async with await open_test_kg(backend, home, ontology=onto) as kg:
        with pytest.raises(InputError, match=r"unknown predicate 'LIKES'.*WORKS_AT"):
            await add(kg, t(2020), ("A", "WORKS_AT", "X"), ("A", "LIKES", "Y"))
        with pytest.raises(InputError, match="unknown predicate"):
            await kg.facts(predicate="LIKES")
        assert (await kg.stats()).episodes == 0


async def test_unsupported_sources_are_refused(kg: KG) -> None:
    with pytest.raises(InputError, match="episodes need an LLM"):
        await kg.add_episode(source="text", content="Alice moved", reference_time=t(2020))


@pytest.mark.parametrize("text", HOSTILE)
async def test_hostile_strings_round_trip_as_data(kg: KG, text: str) -> None:
    await add(kg, t(2020), (text, "KNOWS", text + " friend"), source_description=text)
    [fact] = await kg.facts(subject=text)
    assert fact.subject == text.strip()
    assert fact.object == (text + " friend").strip()
    stats = await kg.stats()
    assert (stats.entities, stats.edge_versions) == (2, 1)


async def test_entity_names_resolve_by_normalised_key(kg: KG) -> None:
    await add(kg, t(2020), ("Alice  Kim", "LIVES_IN", "Seoul"))
    await add(
        kg, t(2021), ("ALICE KIM", "LIVES_IN", "\uff33\uff25\uff2f\uff35\uff2c")
    )  # full-width SEOUL
    assert (await kg.stats()).entities == 2
    [fact] = await kg.facts(subject="alice kim")
    assert fact.subject == "Alice  Kim"  # first spelling is kept as the display name
    assert len(fact.edge.episodes) == 2
    assert objects(await kg.facts(object="seoul")) == ["Seoul"]
