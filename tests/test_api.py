"""The typed public API: add_episode by fields or Episode, bulk ingest, and errors that say
whose fault they are."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import kg.communities as communities
import kg.planners as planners
from kg import KG, Episode, ExtractionError, InputError, LLMRequiredError
from tests.conftest import add, objects, t


def ep(ref_year: int, s: str, p: str, o: str, **extra: Any) -> dict[str, Any]:
    row = {"subject": s, "predicate": p, "object": o}
    return {"source": "facts", "reference_time": t(ref_year), "facts": [row], **extra}


async def test_an_episode_positionally_or_its_fields_but_not_both(kg: KG) -> None:
    episode = Episode.model_validate(ep(2020, "A", "KNOWS", "B"))
    r = await kg.add_episode(episode)
    again = await kg.add_episode(**ep(2020, "A", "KNOWS", "B"))
    assert (r.status, again.status) == ("added", "duplicate")
    assert again.episode_uuid == r.episode_uuid  # the same content, by either door
    with pytest.raises(TypeError, match="not both"):
        await kg.add_episode(episode, group_id="other")
    with pytest.raises(InputError, match=r"facts\.0\.object: Field required"):
        await kg.add_episode(source="facts", facts=[{"subject": "A", "predicate": "K"}])


async def test_add_episodes_validates_everything_before_writing(kg: KG) -> None:
    good = ep(2020, "A", "KNOWS", "B")
    with pytest.raises(InputError, match=r"episodes\[2\]: facts\[0\]: predicate"):
        await kg.add_episodes([good, ep(2021, "A", "KNOWS", "C"), ep(2022, "A", "!!", "D")])
    with pytest.raises(LLMRequiredError, match=r"episodes\[1\]: 'text' episodes need an LLM"):
        await kg.add_episodes(
            [good, {"source": "text", "content": "hi", "reference_time": t(2020)}]
        )
    with pytest.raises(InputError, match=r"episodes\[0\]: .*'2020-13-01' is not a date"):
        await kg.add_episodes([{**good, "reference_time": "2020-13-01"}])
    assert (await kg.stats()).episodes == 0  # the good episodes were not written either


async def test_add_episodes_orders_each_group_and_resumes(kg: KG) -> None:
    seen: list[tuple[int, int]] = []
    episodes = [
        ep(2024, "Minji", "LIVES_IN", "Busan"),  # given first, happened last
        ep(2021, "Minji", "LIVES_IN", "Seoul"),
        ep(2022, "Jun", "LIVES_IN", "Daegu", group_id="b"),
    ]
    r = await kg.add_episodes(episodes, concurrency=2, on_progress=lambda *a: seen.append(a))
    assert (r.added, r.duplicate, r.facts_added, r.facts_closed, r.failed) == (3, 0, 3, 1, [])
    assert sorted(seen) == [(1, 3), (2, 3), (3, 3)]
    assert [x.group_id for x in r.results] == ["default", "default", "b"]  # order given
    assert objects(await kg.facts()) == ["Busan"]
    assert objects(await kg.facts(valid_at=t(2023))) == ["Seoul"]
    assert objects(await kg.facts(group_id="b")) == ["Daegu"]
    again = await kg.add_episodes(episodes)
    assert (again.added, again.duplicate) == (0, 3)


async def test_add_episodes_runs_groups_in_parallel(
    kg: KG, monkeypatch: pytest.MonkeyPatch
) -> None:
    running, most = 0, 0
    add_batch = kg.pipeline.add_batch  # a group's consecutive structured episodes go together

    async def counting(episodes: list[Episode], *rest: Any) -> Any:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.05)
        try:
            return await add_batch(episodes, *rest)
        finally:
            running -= 1

    monkeypatch.setattr(kg.pipeline, "add_batch", counting)
    episodes = [
        ep(2020 + i, f"P{g}", "KNOWS", f"Q{i}", group_id=f"g{g}")
        for g in range(3)
        for i in range(2)
    ]
    await kg.add_episodes(episodes, concurrency=2)
    assert most == 2  # two groups at once, never two episodes of one group
    most = 0
    more = [ep(2030, "X", "KNOWS", f"Y{g}", group_id=f"g{g}") for g in range(3)]
    await kg.add_episodes(more, concurrency=1)
    assert most == 1


async def test_add_episodes_counts_failed_extractions_and_goes_on(
    kg: KG, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_one = kg.pipeline.add

    async def flaky(episode: Episode, *, extract: bool, then: Any = None) -> Any:
        if episode.group_id == "bad":
            raise ExtractionError("extraction failed, episode recorded as failed: no JSON")
        return await add_one(episode, extract=extract, then=then)

    monkeypatch.setattr(kg.pipeline, "add", flaky)
    text = {"source": "message", "content": "A knows B", "reference_time": t(2020)}
    r = await kg.add_episodes([{**text, "group_id": "bad"}, text], extract=False)
    assert r.added == 1 and r.failed == [
        "episodes[0]: extraction failed, episode recorded as failed: no JSON"
    ]


async def test_a_programming_error_while_planning_is_not_an_input_error(
    kg: KG, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        return int("not a number")  # a bug: ValueError, but not the caller's fault

    monkeypatch.setattr(planners, "plan_structured_episode", broken)
    with pytest.raises(ValueError, match="invalid literal") as raised:
        await add(kg, t(2020), ("A", "KNOWS", "B"))
    assert not isinstance(raised.value, InputError)


async def test_ontology_errors_are_still_input_errors(kg: KG) -> None:
    with pytest.raises(InputError, match=r"facts\[0\]: predicate"):
        await add(kg, t(2020), ("A", "!!", "B"))


async def test_communities_refuse_to_cluster_part_of_the_facts(
    kg: KG, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        await add(kg, t(2020), ("A", "KNOWS", f"B{i}"))
    monkeypatch.setattr(communities, "COMMUNITY_MAX_FACTS", 3)
    with pytest.raises(InputError, match="3 or more facts true now"):
        await kg.build_communities()
    assert await kg.communities() == []
    monkeypatch.setattr(communities, "COMMUNITY_MAX_FACTS", 4)
    assert (await kg.build_communities()).communities == 1
