"""Erasure deletes physically: afterwards nothing of the subject is in the graph or on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kg import KG, InputError
from kg.store.falkordb import FalkorDBStore
from tests.conftest import add, objects, t

SECRET = "Zebulon Quisling"


async def graph_dump(kg: KG) -> str:
    """Every property of every node and edge in every graph kg has, as one string."""
    assert isinstance(kg.store, FalkorDBStore)
    parts = []
    for group in await kg.store.groups():
        for q in ("MATCH (n) RETURN labels(n), properties(n)",
                  "MATCH ()-[e]->() RETURN type(e), properties(e)"):  # fmt: skip
            rows = [list(r.values()) for r in await kg.store.raw_query(group, q)]
            parts.append(json.dumps(rows, default=str))
    return "\n".join(parts).lower()


async def fulltext_hits(kg: KG, group: str, word: str) -> int:
    assert isinstance(kg.store, FalkorDBStore)
    hits = 0
    for q in ("CALL db.idx.fulltext.queryNodes('Entity', $w) YIELD node RETURN count(node)",
              "CALL db.idx.fulltext.queryNodes('Episodic', $w) YIELD node RETURN count(node)",
              "CALL db.idx.fulltext.queryRelationships('RELATES_TO', $w) YIELD relationship "
              "RETURN count(relationship)"):  # fmt: skip
        [row] = await kg.store.raw_query(group, q, {"w": word})
        hits += next(iter(row.values()))
    return hits


def files_containing(home: Path, needle: str) -> list[str]:
    hits = []
    for path in home.rglob("*"):
        if path.is_file() and needle.lower().encode() in path.read_bytes().lower():
            hits.append(str(path.relative_to(home)))
    return hits


async def test_erasing_a_subject_leaves_no_trace(kg: KG, home: Path) -> None:
    await add(kg, t(2020), (SECRET, "LIVES_IN", "Seoul"), (SECRET, "KNOWS", "Bob"))
    await add(kg, t(2021), ("Bob", "KNOWS", SECRET), ("Bob", "LIVES_IN", "Daegu"))
    await add(kg, t(2022), ("Bob", "LIVES_IN", "Daegu"), ("Carol", "KNOWS", "Bob"))
    await add(kg, t(2023), (SECRET, "WORKS_AT", "Acme"))
    rolled = await add(kg, t(2024), (SECRET, "LIVES_IN", "Busan"))
    await kg.rollback(rolled.episode_uuid, apply=True)  # rolled-back episodes hold text too
    # The searches below can find the subject: it is everywhere before erasure.
    assert "quisling" in await graph_dump(kg)
    assert await fulltext_hits(kg, "default", "Quisling") > 0
    assert files_containing(home, SECRET)

    receipt = await kg.erase_entity(SECRET.lower())
    assert receipt.subject == SECRET and receipt.files_compacted
    assert receipt.episodes_deleted == 4  # 2020, 2021, 2023 and the rolled-back 2024 one
    assert "quisling" not in await graph_dump(kg)
    assert "zebulon" not in await graph_dump(kg)
    assert await fulltext_hits(kg, "default", "Quisling") == 0
    assert await fulltext_hits(kg, "default", "Zebulon") == 0
    assert files_containing(home, "Quisling") == []

    # Other subjects keep what other episodes support, and lose only what the erased ones did.
    assert objects(await kg.facts(subject="Bob", predicate="LIVES_IN")) == ["Daegu"]
    assert objects(await kg.facts(subject="Carol")) == ["Bob"]
    assert await kg.facts(object=SECRET) == []
    assert await kg.facts(object="Acme") == []  # only the erased episode named it
    [event] = [e for e in await kg.log() if e.kind == "erasure"]
    assert "quisling" not in event.model_dump_json().lower()

    # And it stays gone across a restart (the AOF replays only the rewritten data set).
    await kg.close()
    async with await KG.open(home=home) as again:
        assert "quisling" not in await graph_dump(again)


async def test_erasing_a_group_leaves_no_trace_and_spares_others(kg: KG, home: Path) -> None:
    await add(kg, t(2020), (SECRET, "LIVES_IN", "Seoul"), group_id="tenant-x")
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Busan"), group_id="tenant-y")
    assert files_containing(home, SECRET)
    receipt = await kg.erase_group("tenant-x")
    assert (receipt.episodes_deleted, receipt.entities_deleted) == (1, 2)
    assert await kg.groups() == ["tenant-y"]
    assert files_containing(home, SECRET) == []
    assert objects(await kg.facts(group_id="tenant-y", subject="Alice")) == ["Busan"]
    assert (await kg.stats("tenant-x")).episodes == 0


async def test_erasing_an_unknown_subject_is_an_error(kg: KG) -> None:
    with pytest.raises(InputError, match="no entity named 'Nobody'"):
        await kg.erase_entity("Nobody")
