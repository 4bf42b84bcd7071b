"""A group's full-text search in Neo4j's shared Lucene indexes (kg.store.neo4j.fulltext), on the
session's live Neo4j server: Lucene collects the group's own matches, ranked as before, and a
store written before group keys is keyed and its indexes rebuilt when reopened."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kg.schemas.search import Scope, SearchView
from kg.store.neo4j import Neo4jStore
from tests.conftest import Backend, add, open_test_kg, t

SMALL = [
    ("Minji", "LIVES_IN", "Seoul"),
    ("Minji", "VISITED", "Busan"),
    ("Seoul Cafe", "LOCATED_IN", "Seoul Station Seoul"),
    ("Jisoo", "WORKS_IN", "Busan Seoul office"),
    ("Jisoo", "LIKES", "Jeju"),
]


def view() -> SearchView:
    now = datetime.now(UTC)
    return SearchView(valid_at=now, known_at=now)


async def ranked(store: Neo4jStore, *, keyed: bool) -> list[tuple[str, float]]:
    """The small group's facts for "Seoul Busan", as kg ranks them: through the group key,
    or (`keyed=False`) as before keys, every group's matches filtered after the search."""
    if keyed:
        return await store.rank_text("small", Scope.facts, "Seoul Busan", view(), 10)
    real = store.dialect.in_group
    try:
        store.dialect.in_group = lambda group_id, query: query  # type: ignore[method-assign]
        return await store.rank_text("small", Scope.facts, "Seoul Busan", view(), 10)
    finally:
        store.dialect.in_group = real  # type: ignore[method-assign]


def same(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> None:
    assert [u for u, _ in a] == [u for u, _ in b]
    assert [s for _, s in a] == pytest.approx([s for _, s in b], rel=1e-6)


async def test_a_small_groups_text_search_collects_its_own_matches_ranked_as_before(
    neo4j_backend: Backend, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One Lucene index holds every group's facts. Filtered by group after the search, it
    handed kg every match of a large group beside a small one (the small group's search
    paid for the large one's hundreds of matches for the same words). The query now names
    the group's key: Lucene yields the small group's matches only, and a zero-boost clause
    leaves their BM25 scores, so the ranking is the one the filter-after path gave."""
    async with await open_test_kg(neo4j_backend, home) as graph:
        await add(graph, t(2000), *SMALL, group_id="small")
        store = graph.store
        assert isinstance(store, Neo4jStore)
        await store.ensure_schema("small")
        alone = await ranked(store, keyed=True)
        assert len(alone) == 4  # every fact naming Seoul or Busan, not Jeju
        same(alone, await ranked(store, keyed=False))
        for i in range(0, 300, 100):
            await add(
                graph,
                t(2001 + i // 100),
                *[(f"Person {j}", "LIVES_IN", "Seoul Busan") for j in range(i, i + 100)],
                group_id="large",
            )
        sent: list[dict[str, Any]] = []
        real = store._read

        async def spy(group_id: str, query: str, params: dict[str, Any]) -> Any:
            if "db.index.fulltext" in query:
                sent.append(params)
            return await real(group_id, query, params)

        monkeypatch.setattr(store, "_read", spy)
        beside = await ranked(store, keyed=True)
        same(beside, await ranked(store, keyed=False))
        assert {u for u, _ in beside} == {u for u, _ in alone}  # its own facts, no other's
        # What Lucene hands kg for the query kg sent: the small group's matches, none of the
        # large group's 300.
        rows = await store.raw_query(
            "",
            "CALL db.index.fulltext.queryRelationships('kg_fact_text', $q) "
            "YIELD relationship RETURN relationship.group_id AS g",
            {"q": sent[0]["q"]},
        )
        assert [r["g"] for r in rows] == ["small"] * 4


async def test_a_store_written_before_group_keys_is_keyed_and_reindexed_when_reopened(
    neo4j_backend: Backend, home: Path
) -> None:
    """Items without a key would be invisible to a keyed query: reopening keys them and
    rebuilds each full-text index that does not cover the key."""
    async with await open_test_kg(neo4j_backend, home) as graph:
        await add(graph, t(2000), *SMALL, group_id="small")
        assert isinstance(graph.store, Neo4jStore)
        await graph.store.ensure_schema("small")
        before = await ranked(graph.store, keyed=True)
        for stmt in (  # the store as kg left it before keys
            "MATCH (n) REMOVE n.group_key",
            "MATCH ()-[r]->() REMOVE r.group_key",
            "DROP INDEX kg_fact_text",
            "CREATE FULLTEXT INDEX kg_fact_text FOR ()-[e:RELATES_TO]-() "
            "ON EACH [e.fact, e.text_grams]",
        ):
            await graph.store.raw_query("", stmt, {}, write=True)
    async with await open_test_kg(neo4j_backend, home) as graph:
        store = graph.store
        assert isinstance(store, Neo4jStore)
        await store.ensure_schema("small")
        same(await ranked(store, keyed=True), before)
        indexes = await store.raw_query(
            "", "SHOW FULLTEXT INDEXES YIELD name, properties RETURN name, properties", {}
        )
        assert all("group_key" in r["properties"] for r in indexes), indexes
        unkeyed = await store.raw_query(
            "",
            "MATCH (n) WHERE (n:Entity OR n:Episodic) AND n.group_key IS NULL RETURN n.uuid",
            {},
        )
        assert unkeyed == []
        found = await graph.search("Seoul", group_id="small")
        assert found.facts


async def test_an_imported_group_is_found_under_its_own_key(
    neo4j_backend: Backend, home: Path
) -> None:
    """An import is staged under a staging id and published under the group's: its items'
    keys follow, or the new group's text search would find nothing."""
    async with await open_test_kg(neo4j_backend, home) as graph:
        await add(graph, t(2000), *SMALL, group_id="small")
        lines = [line async for line in graph.export_lines("small")]
        await graph.import_lines(lines, into="copy")
        assert isinstance(graph.store, Neo4jStore)
        hits = await graph.store.rank_text("copy", Scope.facts, "Seoul Busan", view(), 10)
        assert len(hits) == 4


def test_a_group_key_is_one_token_without_separators() -> None:
    from kg.store.neo4j.fulltext import group_key, in_group

    key = group_key("team-a/ü b")
    assert key.isalnum() and key == key.lower() and len(key) == 32
    assert group_key("team-a/ü b") != group_key("team-a/ü c")
    assert in_group("g", "seoul OR busan") == f"+group_key:{group_key('g')}^0 +(seoul OR busan)"
