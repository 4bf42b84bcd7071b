"""Communities on the real store: clustering, summaries, incremental joins, refresh on
rollback and erasure, and community search."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kg import KG
from kg.errors import InputError
from kg.ingest.communities import Cluster, clusters, label_propagation, plan_rebuild
from kg.ingest.llm import ScriptedLLM
from kg.schemas.store import Community
from tests.conftest import Backend, add, open_test_kg, t

FAMILY = [
    ("Minji", "SIBLING_OF", "Jisoo"),
    ("Jisoo", "LIVES_IN", "Busan"),
    ("Minji", "LIVES_IN", "Busan"),
    ("Minji", "KNOWS", "Hana"),
]
HANA = ("Minji", "KNOWS", "Hana")
WORK = [
    ("Dev", "WORKS_AT", "Naver"),
    ("Naver", "LOCATED_IN", "Seongnam"),
    ("Sora", "WORKS_AT", "Naver"),
]


def names(kg_communities: list[Community], entities: dict[str, str]) -> list[list[str]]:
    return sorted(sorted(entities[m] for m in c.members) for c in kg_communities)


async def entity_names(kg: KG) -> dict[str, str]:
    return {f.edge.source_node_uuid: f.subject for f in await kg.facts(limit=1000)} | {
        f.edge.target_node_uuid: f.object for f in await kg.facts(limit=1000)
    }


def test_label_propagation_is_deterministic_and_splits_components() -> None:
    edges = [("a", "b"), ("b", "c"), ("a", "c"), ("x", "y"), ("y", "z")]
    labels = label_propagation(edges)
    assert labels == label_propagation(list(reversed(edges)))
    assert labels["a"] == labels["b"] == labels["c"] != labels["x"]
    assert labels["x"] == labels["y"] == labels["z"]
    # Two triangles joined by one bridge stay two communities.
    bridge = [("a", "b"), ("b", "c"), ("a", "c"), ("d", "e"), ("e", "f"), ("d", "f"), ("c", "d")]
    lab = label_propagation(bridge)
    assert lab["a"] == lab["b"] == lab["c"] and lab["d"] == lab["e"] == lab["f"]
    assert lab["a"] != lab["d"]


async def test_build_clusters_current_facts_and_summarises_them(kg: KG) -> None:
    await add(kg, t(2024, 1, 1), *FAMILY)
    await add(kg, t(2024, 1, 2), *WORK)
    report = await kg.build_communities()
    assert (report.communities, report.summarized, report.kept, report.llm_calls) == (2, 2, 0, 0)
    comms = await kg.communities()
    assert names(comms, await entity_names(kg)) == [
        ["Busan", "Hana", "Jisoo", "Minji"],
        ["Dev", "Naver", "Seongnam", "Sora"],
    ]
    family = next(c for c in comms if "Minji" in c.node.name)
    assert "Minji sibling of Jisoo" in family.node.summary  # extractive without an LLM
    assert family.node.summarizer == "kg.extractive/1" and len(family.node.episodes) == 1
    assert (await kg.stats()).communities == 2
    # Nothing changed: the rebuild reuses both summaries.
    again = await kg.build_communities()
    assert (again.kept, again.summarized, again.deleted) == (2, 0, 0)
    assert [c.node.uuid for c in await kg.communities()] == [c.node.uuid for c in comms]


async def test_a_new_entity_joins_its_neighbours_community_until_the_rebuild(kg: KG) -> None:
    await add(kg, t(2024, 1, 1), *FAMILY)
    await kg.build_communities()
    [before] = await kg.communities()
    await add(kg, t(2024, 2, 1), ("Jisoo", "OWNS", "Bori the dog"))
    [after] = await kg.communities()
    assert after.node.uuid == before.node.uuid and after.node.stale
    assert len(after.members) == len(before.members) + 1
    report = await kg.build_communities()  # stale: summarised again, now with the dog
    assert (report.summarized, report.deleted) == (1, 1)
    [rebuilt] = await kg.communities()
    assert not rebuilt.node.stale and "Bori the dog" in rebuilt.node.summary


async def test_rollback_refreshes_a_summary_that_drew_on_the_episode(kg: KG) -> None:
    base = await add(kg, t(2024, 1, 1), *FAMILY)
    poison = await add(
        kg, t(2024, 1, 5), ("Minji", "KNOWS", "Mallory"), ("Mallory", "KNOWS", "Hana")
    )
    await kg.build_communities()
    assert any("Mallory" in c.node.summary for c in await kg.communities())
    await kg.rollback(poison.episode_uuid, dry_run=False)
    comms = await kg.communities()
    assert comms and not any("Mallory" in c.node.summary for c in comms)
    assert all(poison.episode_uuid not in c.node.episodes for c in comms)
    assert base.episode_uuid in comms[0].node.episodes
    assert (await kg.stats()).entities == 4  # Mallory's node went, membership did not keep it


async def test_erasure_removes_summaries_naming_the_subject(kg: KG) -> None:
    await add(kg, t(2024, 1, 1), *FAMILY[:3])
    await add(kg, t(2024, 1, 1), HANA)  # erasure deletes whole episodes that name Hana
    await add(kg, t(2024, 1, 2), *WORK)
    await kg.build_communities()
    receipt = await kg.erase_entity("Hana")
    assert receipt.communities_deleted == 1
    comms = await kg.communities()
    assert len(comms) == 2 and not any("Hana" in c.node.summary + c.node.name for c in comms)
    assert any("Minji" in c.node.summary for c in comms)  # rebuilt without her


async def test_summaries_through_the_llm_one_call_per_changed_community(
    backend: Backend, home: Path
) -> None:
    def answer(messages: list[dict[str, str]]) -> str:
        assert "You name and summarise a cluster" in messages[0]["content"]
        if "Naver" in messages[1]["content"]:
            return json.dumps({"name": "Naver people", "summary": "Dev and Sora work at Naver."})
        return json.dumps({"name": "Minji's family", "summary": "Minji and Jisoo live in Busan."})

    llm = ScriptedLLM([answer, answer])
    async with await open_test_kg(backend, home, llm=llm) as kg:
        await add(kg, t(2024, 1, 1), *FAMILY)
        await add(kg, t(2024, 1, 2), *WORK)
        report = await kg.build_communities()
        assert (report.llm_calls, report.summarized, report.errors) == (2, 2, [])
        assert sorted(c.node.name for c in await kg.communities()) == [
            "Minji's family",
            "Naver people",
        ]
        # A failing model falls back to the extractive summary for that community, reported.
        llm._replies += ["nonsense", "nonsense"]
        await add(kg, t(2024, 3, 1), ("Sora", "KNOWS", "Dev"))
        report = await kg.build_communities()
        assert report.summarized == 1 and report.llm_calls == 2 and len(report.errors) == 1
        by = {c.node.summarizer: c.node.summary for c in await kg.communities()}
        assert by == {
            "llm:scripted": "Minji and Jisoo live in Busan.",
            "kg.extractive/1": by["kg.extractive/1"],
        }
        assert "Sora knows Dev" in by["kg.extractive/1"]


async def test_community_search_finds_the_summary(kg: KG) -> None:
    await add(kg, t(2024, 1, 1), *FAMILY)
    await add(kg, t(2024, 1, 2), *WORK)
    await kg.build_communities()
    hits = await kg.search("who works at Naver", recipe="communities_bm25")
    assert hits.communities and "Naver" in hits.communities[0].community.summary


async def test_bad_arguments_are_refused(kg: KG) -> None:
    with pytest.raises(InputError, match="max_iterations"):
        await kg.build_communities(max_iterations=0)
    assert (await kg.build_communities()).communities == 0  # an empty group: nothing to do


def test_rebuild_keeps_only_unchanged_clean_clusters() -> None:
    cs = clusters([])
    assert cs == [] and plan_rebuild("g", [], [])[0].delete == []
    c = Cluster(members=("a", "b"), facts=())
    plan, todo = plan_rebuild("g", [c], [])
    assert todo == [c] and plan.delete == []
