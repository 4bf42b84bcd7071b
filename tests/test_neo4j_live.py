"""What only Neo4j shows, on the session's live Neo4j 5.26 server (tests/neo4j_server.py): its
schema, native DateTimes, no notification noise, routing and bookmarks, wrong credentials.

Every behaviour test of the suite runs on both backends (the `backend` fixture); this module
holds the checks that have no FalkorDB counterpart.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kg import KG
from kg.ingest.embeddings import Embedder, local_minilm
from kg.store.neo4j import Neo4jStore
from tests.conftest import Backend, add, objects, open_test_kg, t
from tests.neo4j_server import Neo4jServer


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    return local_minilm()


@pytest.fixture
async def n4(neo4j_backend: Backend, home: Path, minilm: Embedder) -> AsyncIterator[KG]:
    graph = await open_test_kg(neo4j_backend, home, embedder=minilm)
    try:
        yield graph
    finally:
        await graph.close()


async def cypher(graph: KG, query: str, **params: Any) -> list[dict[str, Any]]:
    assert isinstance(graph.store, Neo4jStore)
    return await graph.store.raw_query("", query, params)


async def test_schema_is_created_online_and_idempotent(
    neo4j_backend: Backend, home: Path, minilm: Embedder
) -> None:
    for _ in range(2):  # a second kg on the same server re-runs the DDL harmlessly
        async with await open_test_kg(neo4j_backend, home, embedder=minilm) as graph:
            await graph.store.ensure_schema("default")
            await cypher(graph, "CALL db.awaitIndexes(300)")
            rows = await cypher(
                graph,
                "SHOW INDEXES YIELD name, type, state, options "
                "WHERE name STARTS WITH 'kg_' RETURN *",
            )
            constraints = await cypher(graph, "SHOW CONSTRAINTS YIELD name RETURN name")
    by_name = {r["name"]: r for r in rows}
    assert {r["state"] for r in rows} == {"ONLINE"}
    assert by_name["kg_fact_text"]["type"] == "FULLTEXT"
    vector = by_name["kg_fact_embedding"]
    assert vector["type"] == "VECTOR"
    assert vector["options"]["indexConfig"]["vector.dimensions"] == minilm.dim
    assert vector["options"]["indexConfig"]["vector.similarity_function"] == "COSINE"
    assert vector["options"]["indexConfig"]["vector.quantization.enabled"] is False
    assert constraints, "uniqueness constraints exist"


async def test_times_are_native_datetimes(n4: KG) -> None:
    await add(n4, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    [row] = await cypher(
        n4,
        "MATCH ()-[e:RELATES_TO]->() RETURN valueType(e.valid_at) AS v, "
        "valueType(e.created_at) AS c, e.valid_at.year AS year",
    )
    assert row == {"v": "ZONED DATETIME NOT NULL", "c": "ZONED DATETIME NOT NULL", "year": 2020}


async def test_reads_log_no_server_notifications(n4: KG, caplog: pytest.LogCaptureFixture) -> None:
    # A fresh database has no Community label, HAS_MEMBER type or `stale` property yet; Neo4j
    # answers such reads with "does not exist" warnings, which the driver logs at WARNING.
    with caplog.at_level(logging.INFO):
        await add(n4, t(2020), ("Alice", "LIVES_IN", "Seoul"))
        assert await n4.communities() == []
        _ = [line async for line in n4.export_lines()]
    assert [r.getMessage()[:80] for r in caplog.records if r.name.startswith("neo4j")] == []


async def test_the_routing_scheme_works_and_writes_leave_a_bookmark_for_reads(
    neo4j_backend: Backend, home: Path
) -> None:
    """`neo4j://` asks the server for a routing table (a single Community server answers with
    itself); kg's writes and reads share the driver's bookmark manager, so on a cluster a read
    after a write waits for that write (read-your-writes within one KG)."""
    server = neo4j_backend.server
    assert server is not None
    routed = server.kg_uri.replace("bolt://", "neo4j://")
    async with await KG.open(routed) as graph:
        store = graph.store
        assert isinstance(store, Neo4jStore)
        manager = store._driver.execute_query_bookmark_manager
        before = await manager.get_bookmarks()  # KG.open's reads (pending erasures) may set one
        await add(graph, t(2020), ("Alice", "LIVES_IN", "Seoul"))
        after_write = await manager.get_bookmarks()
        assert after_write and after_write != before, "the write's bookmark is kept for reads"
        assert objects(await graph.facts(subject="Alice")) == ["Seoul"]
        [row] = await cypher(
            graph, "CALL dbms.routing.getRoutingTable({}, 'neo4j') YIELD servers RETURN servers"
        )
        roles = {s["role"] for s in row["servers"]}
        assert roles == {"WRITE", "READ", "ROUTE"}


async def test_wrong_credentials_are_a_clear_error(neo4j_server: Neo4jServer) -> None:
    from kg.errors import StoreUnavailableError

    uri = neo4j_server.uri.replace("bolt://", "bolt://neo4j:not-the-password@")
    with pytest.raises(StoreUnavailableError) as err:
        await KG.open(uri)
    message = str(err.value)
    assert "refused the credentials" in message and "not-the-password" not in message


def _operators(plan: Any) -> list[tuple[str, str]]:
    """(operator, details) of a query plan and everything under it."""
    out = [(plan.get("operatorType", ""), str(plan.get("args", {}).get("Details", "")))]
    for child in plan.get("children", []):
        out += _operators(child)
    return out


async def test_a_timeline_is_read_from_its_subject_not_every_edge_of_its_predicate(
    neo4j_backend: Backend, home: Path
) -> None:
    """The planning read finds a timeline's versions through its subject's (group, name key)
    index and the subject's own edges. Seeking the (group, predicate) relationship index
    instead reads every edge of the group with that predicate, on every episode: an ingest
    that slows down as the group grows."""
    from kg.ingest.structured import planning_names
    from kg.schemas import DEFAULT_ONTOLOGY, Episode

    facts = [(f"Person {i}", "LIVES_IN", f"City {i % 7}") for i in range(60)]
    episode = Episode(
        source="facts",
        reference_time=t(2100),
        facts=[{"subject": "Person 3", "predicate": "LIVES_IN", "object": "City 5"}],
    )
    async with await open_test_kg(neo4j_backend, home) as graph:
        for i in range(0, 60, 10):
            await add(graph, t(2000 + i), *facts[i : i + 10])
        store = graph.store
        assert isinstance(store, Neo4jStore)
        read = store.planning_read("default", planning_names(episode, DEFAULT_ONTOLOGY))
        _, summary, _ = await store._driver.execute_query("PROFILE " + read.query, read.params)
    ops = _operators(summary.profile)
    seeks = [(op, d) for op, d in ops if "Seek" in op]
    assert not [op for op, _ in seeks if "Relationship" in op], seeks
    plan = "\n".join(f"{o} {d}" for o, d in ops)
    assert any("Entity(group_id, name_key)" in d and "k.subject" in d for _, d in seeks), plan


class KeywordEmbedder:
    """Vectors by keyword, so the test knows every cosine: a query (`where`) is [1, 0, 0, 0];
    what names `Decoy` lies very near it, what names `Target` at cosine 0.8."""

    model, dim = "keyword-test", 4

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        def one(text: str) -> list[float]:
            if "Decoy" in text:
                return [0.998, 0.0632, 0.0, 0.0]
            if "Target" in text:
                return [0.8, 0.6, 0.0, 0.0]
            return [1.0, 0.0, 0.0, 0.0] if "where" in text else [0.0, 0.0, 0.0, 1.0]

        return [one(t) for t in texts]


async def test_a_small_groups_cosine_branch_reads_its_own_facts_not_the_shared_index(
    neo4j_backend: Backend, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One Neo4j vector index holds every group's facts, and it takes k and no filter. A
    small group's nearest facts sat behind a large group's: the index was read with a k
    widened to VECTOR_K_MAX, and a small group whose facts all lay past it found none. A
    group of at most EXACT_COSINE_MAX facts whose first index answer falls short is scored
    exactly over its own facts (the true top k, scores as the index gives them); a larger
    one widens the index's k, and one that is most of the index keeps its first answer."""
    import kg.store.cypher.search as shared
    from kg.schemas.search import Scope, SearchView
    from kg.store.neo4j import cosine

    monkeypatch.setattr(shared, "VECTOR_K_MAX", 40)  # a large group: more than k_max nearer
    async with await open_test_kg(neo4j_backend, home, embedder=KeywordEmbedder()) as graph:
        for i in range(0, 60, 20):
            await add(
                graph,
                t(2000 + i),
                *[(f"Decoy {j}", "LIVES_IN", "Atlantis") for j in range(i, i + 20)],
                group_id="big",
            )
        await add(
            graph,
            t(2000),
            *[(f"Target {j}", "LIVES_IN", "Lemuria") for j in range(3)],
            group_id="small",
        )
        store = graph.store
        assert isinstance(store, Neo4jStore)
        sent: list[str] = []
        real = store._read

        async def spy(group_id: str, query: str, params: dict[str, Any]) -> Any:
            sent.append(query)
            return await real(group_id, query, params)

        monkeypatch.setattr(store, "_read", spy)
        now = datetime.now(UTC)
        view = SearchView(valid_at=now, known_at=now)
        found = await store.search_vector("small", Scope.facts, [1.0, 0, 0, 0], view, 10)
        assert sorted(h.item.subject for h in found) == ["Target 0", "Target 1", "Target 2"]  # type: ignore[union-attr]
        assert all(abs(h.score - 0.8) < 1e-6 for h in found), [h.score for h in found]
        assert len([q for q in sent if "db.index.vector" in q]) == 1  # its first k, not widened
        assert any("vector.similarity.cosine" in q for q in sent)
        # A group that holds most of the index: the index (its first k finds its own facts).
        sent.clear()
        big = await store.search_vector("big", Scope.facts, [1.0, 0, 0, 0], view, 10)
        assert len(big) == 10 and all(abs(h.score - 0.998) < 1e-3 for h in big)
        assert any("db.index.vector.queryRelationships" in q for q in sent)
        assert not any("vector.similarity.cosine" in q for q in sent)
        # Above the bound: the index too, however small the group's share.
        monkeypatch.setattr(cosine, "EXACT_COSINE_MAX", 2)
        store._sizes.clear()
        sent.clear()
        await store.search_vector("small", Scope.facts, [1.0, 0, 0, 0], view, 10)
        assert any("db.index.vector.queryRelationships" in q for q in sent)
        assert not any("vector.similarity.cosine" in q for q in sent)


async def test_a_group_alone_in_the_vector_index_keeps_its_answer_not_a_scan(
    neo4j_backend: Backend, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group with every embedded fact of the database, beside groups written without an
    embedder: the index's first answer already holds all its facts, so it is not scored again
    by reading every vector of the group (counting the database's facts, the others'
    unembedded ones included, once sent such a group to the exact scan: 0.5 s a search at
    10,000 facts, against 20 ms for the index)."""
    from kg.schemas.search import Scope, SearchView

    async with await open_test_kg(neo4j_backend, home, embedder=KeywordEmbedder()) as graph:
        plain = KG(graph.store)  # no embedder: these facts are not in the vector index
        for i in range(0, 60, 20):
            await add(
                plain,
                t(2000 + i),
                *[(f"Plain {j}", "LIVES_IN", "Mu") for j in range(i, i + 20)],
                group_id="plain",
            )
        await add(
            graph,
            t(2000),
            *[(f"Target {j}", "LIVES_IN", "Lemuria") for j in range(5)],
            group_id="alone",
        )
        store = graph.store
        assert isinstance(store, Neo4jStore)
        sent: list[str] = []
        real = store._read

        async def spy(group_id: str, query: str, params: dict[str, Any]) -> Any:
            sent.append(query)
            return await real(group_id, query, params)

        monkeypatch.setattr(store, "_read", spy)
        now = datetime.now(UTC)
        view = SearchView(valid_at=now, known_at=now)
        found = await store.search_vector("alone", Scope.facts, [1.0, 0, 0, 0], view, 10)
        assert sorted(h.item.subject for h in found) == [f"Target {j}" for j in range(5)]  # type: ignore[union-attr]
        assert all(abs(h.score - 0.8) < 1e-6 for h in found), [h.score for h in found]
        assert len([q for q in sent if "db.index.vector" in q]) == 1
        assert not any("vector.similarity.cosine" in q for q in sent)


async def test_no_write_statement_scans_a_label(neo4j_backend: Backend, home: Path) -> None:
    """Every statement of a write plan, one episode's and a batch's, finds its nodes and
    edges through an index: one Neo4j database holds every group, so a node matched by its
    uuid alone (the uniqueness index is on group and uuid) is a scan of every group's nodes
    with that label, on every write (a batch's mentions did, and ingest slowed with the
    database)."""
    from kg.ingest.structured import plan_structured_episode
    from kg.schemas import DEFAULT_ONTOLOGY, Episode

    async with await open_test_kg(neo4j_backend, home) as graph:
        await add(graph, t(2000), ("Ann", "LIVES_IN", "Seoul"), ("Ann", "KNOWS", "Bob"))
        store = graph.store
        assert isinstance(store, Neo4jStore)
        plans = []
        for year, city in ((2010, "Busan"), (2011, "Daegu")):
            facts = [
                {"subject": "Ann", "predicate": "LIVES_IN", "object": city},
                {"subject": "Ann", "predicate": "KNOWS", "object": "Bob"},
            ]
            episode = Episode(source="facts", reference_time=t(year), facts=facts)
            plan, _ = await plan_structured_episode(episode, store, DEFAULT_ONTOLOGY, t(2030))
            plans.append(plan)
        statements = [*store.compile_plan(plans[0]), *store.compile_many(plans)]
        scans = []
        for s in statements:
            _, summary, _ = await store._driver.execute_query("EXPLAIN " + s.query, s.params)
            scans += [
                (op, s.query[:80])
                for op, _ in _operators(summary.plan)
                if "LabelScan" in op or "AllNodesScan" in op
            ]
        assert scans == []


class HashEmbedder:
    """Vectors spread at random by each text's hash: one group's items share every region
    of the index with another's, in proportion to their numbers."""

    model, dim = "hash-test", 8

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import hashlib

        def one(text: str) -> list[float]:
            digest = hashlib.sha256(text.encode()).digest()
            return [b / 255 - 0.5 for b in digest[: self.dim]]

        return [one(t) for t in texts]


async def test_a_small_group_beside_a_large_one_is_answered_by_one_widened_index_query(
    neo4j_backend: Backend, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group with a tenth of the index: the first k (3 x the limit) held about three of
    its items, so every search scanned the group's vectors exactly (beside a 100,000-fact
    group, 305 ms against 185 for the index). k over its share (kg.store.neo4j.cosine.index_k)
    holds enough of them: one index query, and the exact top 10."""
    from kg.schemas.search import Scope, SearchView
    from kg.store.neo4j import cosine

    monkeypatch.setattr(cosine, "INDEX_K_PER_ITEM", 10.0)  # tiny groups: not capped
    async with await open_test_kg(neo4j_backend, home, embedder=HashEmbedder()) as graph:
        for group, n in (("large", 540), ("small", 60)):
            for i in range(0, n, 60):
                facts = [(f"{group} {j}", "LIVES_IN", f"Place {j}") for j in range(i, i + 60)]
                await add(graph, t(2000 + i // 60), *facts, group_id=group)
        store = graph.store
        assert isinstance(store, Neo4jStore)
        now = datetime.now(UTC)
        view = SearchView(valid_at=now, known_at=now)
        query = (await HashEmbedder().embed(["where"]))[0]
        row = store._vector_row(Scope.facts, full=False)
        exact = await store.raw_query(
            "small",
            cosine.exact_query(Scope.facts, view, row),
            {**store._view_params("small", view), "v": query, "k": 10},
        )
        sent: list[tuple[str, dict[str, Any]]] = []
        real = store._read

        async def spy(group_id: str, q: str, params: dict[str, Any]) -> Any:
            sent.append((q, params))
            return await real(group_id, q, params)

        monkeypatch.setattr(store, "_read", spy)
        found = await store.rank_vector("small", Scope.facts, query, view, 10)
        assert [u for u, _ in found] == [r["row"] for r in exact]
        asked = [p["k"] for q, p in sent if "db.index.vector" in q]
        assert asked == [30, 200]  # its first k, then 2 x 10 over a share of 60 / 600
        assert not any("vector.similarity.cosine" in q for q, _ in sent)
