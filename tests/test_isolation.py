"""Nothing of one group is visible from another, through any call."""

from __future__ import annotations

import asyncio

import pytest

from kg import KG, InputError
from tests.conftest import add, objects, t


async def test_groups_share_nothing(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"), group_id="tenant-a")
    await add(kg, t(2021), ("Alice", "LIVES_IN", "Busan"), group_id="tenant-b")

    # Same entity name in both groups: resolved separately, and no cross-group supersede.
    assert objects(await kg.facts(group_id="tenant-a", subject="Alice")) == ["Seoul"]
    assert objects(await kg.facts(group_id="tenant-b", subject="Alice")) == ["Busan"]
    assert objects(await kg.facts(group_id="tenant-a")) == ["Seoul"]
    assert [f.object for f in await kg.history(group_id="tenant-b")] == ["Busan"]
    assert (await kg.stats("tenant-a")).entities == 2
    assert (await kg.stats("tenant-a")).edge_versions == 1
    assert objects(await kg.facts(group_id="tenant-c")) == []
    assert (await kg.stats("tenant-c")).episodes == 0
    assert await kg.groups() == ["tenant-a", "tenant-b"]


async def test_duplicate_detection_does_not_leak_across_groups(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"), group_id="a")
    # A duplicate in group a must not tell group b anything: b gets its own episode.
    r = await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"), group_id="b")
    assert r.status == "added"
    assert (await kg.stats("b")).episodes == 1


@pytest.mark.parametrize("bad", ["", "a b", "x" * 65, "../etc", "g;DROP", "ü"])
async def test_invalid_group_ids_are_refused_everywhere(kg: KG, bad: str) -> None:
    with pytest.raises(InputError, match="group_id"):
        await add(kg, t(2020), ("A", "KNOWS", "B"), group_id=bad)
    with pytest.raises(InputError, match="group_id"):
        await kg.facts(group_id=bad)
    with pytest.raises(InputError, match="group_id"):
        await kg.history(group_id=bad)
    with pytest.raises(InputError, match="group_id"):
        await kg.stats(bad)


async def test_concurrent_readers_and_writers_queue_instead_of_failing(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    writes = [
        add(kg, t(2021), (f"P{i}", "LIVES_IN", "Busan"), group_id=f"g{i % 4}") for i in range(40)
    ]
    reads = [kg.facts(subject="Alice") for _ in range(100)]
    results = await asyncio.gather(*writes, *reads)
    assert all(objects(r) == ["Seoul"] for r in results[40:])
    per_group = [(await kg.stats(f"g{i}")).episodes for i in range(4)]
    assert per_group == [10, 10, 10, 10]
