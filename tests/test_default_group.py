"""`KG.open(group_id=...)` sets the group every method reads and writes unless a call names
another (issue 24): a multi-tenant agent that opens kg for one user never writes to 'default'."""

from __future__ import annotations

from pathlib import Path

from kg.schemas.episode import Episode, EpisodeSource, StructuredFact
from tests.conftest import Backend, add, open_test_kg, t


async def test_the_opened_group_is_every_methods_default(backend: Backend, home: Path) -> None:
    kg = await open_test_kg(backend, home, group_id="user-42")
    try:
        first = await add(kg, t(2020), ("Alice", "LIVES_IN", "Paris"))
        await kg.add_episode(
            Episode(
                source=EpisodeSource.facts,
                reference_time=t(2021),
                facts=[StructuredFact(subject="Alice", predicate="WORKS_AT", object="Acme")],
            )
        )
        await kg.add_episodes(
            [
                {
                    "source": "facts",
                    "reference_time": t(2022).isoformat(),
                    "facts": [{"subject": "Bob", "predicate": "LIVES_IN", "object": "Rome"}],
                }
            ]
        )
        assert await kg.groups() == ["user-42"]
        assert sorted(f.object for f in await kg.facts()) == ["Acme", "Paris", "Rome"]
        assert len(await kg.history(subject="Alice")) == 2
        assert (await kg.stats()).group_id == "user-42"
        assert (await kg.search("Alice Paris")).facts
        fact = (await kg.facts(subject="Alice", predicate="LIVES_IN"))[0]
        assert (await kg.why(fact.edge.fact_uuid)).versions
        assert (await kg.rollback(first.episode_uuid)).episodes == [first.episode_uuid]
        # naming a group still wins
        assert await kg.facts(group_id="default") == []
        await add(kg, t(2020), ("Carol", "LIVES_IN", "Oslo"), group_id="other")
        assert [f.object for f in await kg.facts(group_id="other")] == ["Oslo"]
    finally:
        await kg.close()
