"""Idempotency, trust-tier gating and provenance of stored facts."""

from __future__ import annotations

from kg import KG
from tests.conftest import add, fact, objects, t


async def test_re_adding_the_same_episode_is_a_no_op(kg: KG) -> None:
    first = await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    again = await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"), name="a different label")
    assert again.status == "duplicate"
    assert again.episode_uuid == first.episode_uuid
    stats = await kg.stats()
    assert (stats.episodes, stats.edge_versions) == (1, 1)


async def test_same_facts_at_another_time_are_a_new_episode(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    later = await add(kg, t(2021), ("Alice", "LIVES_IN", "Seoul"))
    assert later.status == "added"
    assert later.summary.facts_reinforced == 1
    assert (await kg.stats()).episodes == 2


async def test_idempotency_is_per_group(kg: KG) -> None:
    a = await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"), group_id="a")
    b = await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"), group_id="b")
    assert (a.status, b.status) == ("added", "added")


async def test_lower_trust_cannot_close_a_higher_trust_fact(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"), channel="user")
    web = await add(
        kg,
        t(2023),
        ("Alice", "LIVES_IN", "Busan"),
        channel="document",
        source_description="https://example.com/profile",
    )
    assert web.summary.facts_closed == 0
    assert web.summary.facts_contested == 1
    assert objects(await kg.facts(subject="Alice")) == ["Seoul"]
    contested = await kg.facts(subject="Alice", include_contested=True)
    assert objects(contested) == ["Busan", "Seoul"]
    busan = next(f for f in contested if f.object == "Busan")
    assert busan.edge.status == "contested"
    assert busan.edge.channel == "document"
    assert (await kg.stats()).contested_facts == 1


async def test_lower_trust_cannot_end_a_higher_trust_fact(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "MEMBER_OF", "Chess Club"), channel="user")
    end = await add(
        kg,
        t(2023),
        fact("Alice", "MEMBER_OF", "Chess Club", None, "2024-01-01T00:00:00Z"),
        channel="agent",
    )
    assert (end.summary.facts_closed, end.summary.facts_contested) == (0, 1)
    assert objects(await kg.facts(subject="Alice", valid_at=t(2025))) == ["Chess Club"]


async def test_higher_or_equal_trust_closes_lower(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"), channel="tool")
    user = await add(kg, t(2023), ("Alice", "LIVES_IN", "Busan"), channel="user")
    assert user.summary.facts_closed == 1
    tool = await add(kg, t(2024), ("Alice", "LIVES_IN", "Daegu"), channel="user", trust=3)
    assert tool.summary.facts_closed == 1
    assert objects(await kg.facts(subject="Alice")) == ["Daegu"]


async def test_explicit_trust_overrides_the_channel_default(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"), channel="document", trust="user")
    attempt = await add(kg, t(2023), ("Alice", "LIVES_IN", "Busan"), channel="tool")
    assert attempt.summary.facts_contested == 1


async def test_each_version_records_its_provenance(kg: KG) -> None:
    r = await add(
        kg, t(2020), ("Alice", "LIVES_IN", "Seoul"), channel="tool", source_description="crm sync"
    )
    [fact] = await kg.facts(subject="Alice")
    assert fact.edge.episodes == [r.episode_uuid]
    assert fact.edge.channel == "tool"
    assert fact.edge.trust.name == "tool"
    assert fact.edge.extractor == "kg.structured/1"
    assert fact.edge.fact == "Alice lives in Seoul"
