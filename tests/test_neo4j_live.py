"""kg on a live Neo4j 5.26 server, side by side with the embedded FalkorDB store.

Each behaviour test runs on both backends (the `backend` parameter) and asserts the same
answers; what only Neo4j shows (its schema, native DateTimes, Lucene, what a delete leaves
in the graph) has its own tests. The server is the session's (tests/neo4j_server.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kg import KG, InputError
from kg.ingest.embeddings import Embedder, local_minilm
from kg.retrieval import SearchConfig
from kg.retrieval.config import Method, Reranker, ScopeConfig
from kg.store.neo4j import Neo4jStore
from tests.conftest import add, objects, t, wipe
from tests.neo4j_server import Neo4jServer

SECRET = "Zebulon Quisling"


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    return local_minilm()


async def open_kg(backend: str, server: Neo4jServer | None, home: Path, emb: Embedder) -> KG:
    if backend == "falkordb":
        return await KG.open(home=home, embedder=emb)
    assert server is not None
    graph = await KG.open(server.kg_uri, embedder=emb)
    await wipe(graph)
    return graph


@pytest.fixture(params=["falkordb", "neo4j"])
async def kg(request: pytest.FixtureRequest, home: Path, minilm: Embedder) -> AsyncIterator[KG]:
    server = request.getfixturevalue("neo4j_server") if request.param == "neo4j" else None
    graph = await open_kg(request.param, server, home, minilm)
    try:
        yield graph
    finally:
        await graph.close()


@pytest.fixture
async def n4(neo4j_server: Neo4jServer, minilm: Embedder) -> AsyncIterator[KG]:
    graph = await open_kg("neo4j", neo4j_server, Path("/nonexistent"), minilm)
    try:
        yield graph
    finally:
        await graph.close()


async def cypher(graph: KG, query: str, **params: Any) -> list[dict[str, Any]]:
    assert isinstance(graph.store, Neo4jStore)
    return await graph.store.raw_query("", query, params)


# -- Neo4j only ------------------------------------------------------------------------------


async def test_schema_is_created_online_and_idempotent(
    neo4j_server: Neo4jServer, minilm: Embedder
) -> None:
    for _ in range(2):  # a second kg on the same server re-runs the DDL harmlessly
        async with await KG.open(neo4j_server.kg_uri, embedder=minilm) as graph:
            await graph.store.ensure_schema("default")
            await cypher(graph, "CALL db.awaitIndexes(300)")
            rows = await cypher(graph, "SHOW INDEXES YIELD name, type, state, options "
                                       "WHERE name STARTS WITH 'kg_' RETURN *")  # fmt: skip
            constraints = await cypher(graph, "SHOW CONSTRAINTS YIELD name RETURN name")
    by_name = {r["name"]: r for r in rows}
    assert {r["state"] for r in rows} == {"ONLINE"}
    assert by_name["kg_fact_text"]["type"] == "FULLTEXT"
    vector = by_name["kg_fact_embedding"]
    assert vector["type"] == "VECTOR"
    assert vector["options"]["indexConfig"]["vector.dimensions"] == minilm.dim
    assert vector["options"]["indexConfig"]["vector.similarity_function"] == "COSINE"
    assert constraints, "uniqueness constraints exist"


async def test_times_are_native_datetimes(n4: KG) -> None:
    await add(n4, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    [row] = await cypher(
        n4, "MATCH ()-[e:RELATES_TO]->() RETURN valueType(e.valid_at) AS v, "
            "valueType(e.created_at) AS c, e.valid_at.year AS year"
    )  # fmt: skip
    assert row == {"v": "ZONED DATETIME NOT NULL", "c": "ZONED DATETIME NOT NULL", "year": 2020}


async def test_reads_log_no_server_notifications(n4: KG, caplog: pytest.LogCaptureFixture) -> None:
    # A fresh database has no Community label, HAS_MEMBER type or `stale` property yet; Neo4j
    # answers such reads with "does not exist" warnings, which the driver logs at WARNING.
    with caplog.at_level(logging.INFO):
        await add(n4, t(2020), ("Alice", "LIVES_IN", "Seoul"))
        assert await n4.communities() == []
        _ = [line async for line in n4.export_lines()]
    assert [r.getMessage()[:80] for r in caplog.records if r.name.startswith("neo4j")] == []


async def test_erasure_leaves_nothing_in_the_graph_or_the_lucene_index(n4: KG) -> None:
    await add(n4, t(2020), (SECRET, "LIVES_IN", "Seoul"), (SECRET, "KNOWS", "Bob"))
    await add(n4, t(2021), ("Bob", "LIVES_IN", "Busan"))
    receipt = await n4.erase_entity(SECRET)
    assert receipt.entities_deleted >= 1 and receipt.episodes_deleted == 1
    dump = json.dumps(
        await cypher(n4, "MATCH (n) OPTIONAL MATCH (n)-[e]->() "
                         "RETURN labels(n), properties(n), type(e), properties(e)"),
        default=str,
    ).lower()  # fmt: skip
    assert "zebulon" not in dump and "busan" in dump
    for index, kind in (("kg_fact_text", "Relationships"), ("kg_entity_text", "Nodes"),
                        ("kg_episode_text", "Nodes")):  # fmt: skip
        hits = await cypher(n4, f"CALL db.index.fulltext.query{kind}($i, 'zebulon') "
                                "YIELD score RETURN count(*) AS n", i=index)  # fmt: skip
        assert hits == [{"n": 0}], index


# -- both backends ---------------------------------------------------------------------------


async def test_structured_episode_writes_facts_and_stats(kg: KG) -> None:
    r = await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"), ("Alice", "KNOWS", "Bob"))
    assert (r.status, r.summary.facts_added, r.summary.entities_added) == ("added", 2, 3)
    again = await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"), ("Alice", "KNOWS", "Bob"))
    assert again.status == "duplicate"
    stats = await kg.stats()
    counts = (stats.episodes, stats.entities, stats.edge_versions, stats.current_facts)
    assert counts == (1, 3, 2, 2)
    assert await kg.groups() == ["default"]


async def test_supersede_closes_the_old_fact_with_provenance(kg: KG) -> None:
    first = await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    second = await add(kg, t(2023, 5), ("Alice", "lives in", "Busan"))
    assert second.summary.facts_closed == 1
    assert objects(await kg.facts(subject="alice")) == ["Busan"]
    versions = await kg.history(subject="Alice", predicate="LIVES_IN")
    seoul = [v.edge for v in versions if v.object == "Seoul"]
    retired = next(v for v in seoul if v.expired_at is not None)
    closed = next(v for v in seoul if v.expired_at is None)
    assert retired.invalid_at is None and retired.expired_at == closed.created_at
    assert closed.invalid_at == t(2023, 5)
    assert closed.invalidated_by == second.episode_uuid
    assert closed.supersedes == retired.uuid and closed.fact_uuid == retired.fact_uuid
    assert closed.episodes == [first.episode_uuid]


async def test_as_of_both_time_axes(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    before = kg.clock.now()
    await add(kg, t(2023, 5), ("Alice", "LIVES_IN", "Busan"))
    after = kg.clock.now()
    assert objects(await kg.facts(subject="Alice", valid_at=t(2019))) == []
    assert objects(await kg.facts(subject="Alice", valid_at=t(2023, 4, 30))) == ["Seoul"]
    assert objects(await kg.facts(subject="Alice", valid_at=t(2023, 5))) == ["Busan"]
    assert objects(await kg.facts(subject="Alice", valid_at=t(2024), known_at=before)) == ["Seoul"]
    assert objects(await kg.facts(subject="Alice", valid_at=t(2024), known_at=after)) == ["Busan"]


async def test_history_lists_every_version_in_order(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    await add(kg, t(2023), ("Alice", "LIVES_IN", "Busan"))
    await add(kg, t(2024), ("Alice", "LIVES_IN", "Jeju"))
    versions = await kg.history(subject="Alice", predicate="LIVES_IN")
    assert len(versions) == 5  # 3 originals, 2 closed copies
    current = [(v.object, v.edge.valid_at, v.edge.invalid_at) for v in versions
               if v.edge.expired_at is None]  # fmt: skip
    assert sorted(current, key=lambda c: c[1]) == [
        ("Seoul", t(2020), t(2023)), ("Busan", t(2023), t(2024)), ("Jeju", t(2024), None),
    ]  # fmt: skip


def only(method: Method, scope: str = "facts") -> SearchConfig:
    return SearchConfig(**{scope: ScopeConfig(methods=(method,), reranker=Reranker.rrf)})


async def seed(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"), ("Alice", "LIKES", "Jazz music"),
              ("Alice", "WORKS_AT", "Naver"))  # fmt: skip
    await add(kg, t(2023), ("Alice", "LIVES_IN", "Busan"))
    await add(kg, t(2021), ("Bob", "OWNS", "A red bicycle"))


async def test_text_search_finds_shared_words_of_current_facts(kg: KG) -> None:
    await seed(kg)
    r = await kg.search("bicycle", config=only(Method.bm25))
    assert [h.fact.edge.fact for h in r.facts] == ["Bob owns A red bicycle"]
    r = await kg.search("Alice lives", config=only(Method.bm25))
    assert r.facts[0].fact.object == "Busan"  # the closed Seoul copy ranks lower
    assert "Seoul" not in [h.fact.object for h in r.facts if h.fact.edge.invalid_at is None]
    r = await kg.search("bicycle", config=only(Method.bm25, "entities"))
    assert [h.entity.name for h in r.entities] == ["A red bicycle"]


async def test_vector_search_finds_a_paraphrase(kg: KG) -> None:
    await seed(kg)
    r = await kg.search("two-wheeled vehicle", config=only(Method.cosine))
    assert r.facts[0].fact.edge.fact == "Bob owns A red bicycle"
    assert all(b.error is None for b in r.branches)
    r = await kg.search("her favourite kind of music", config=only(Method.cosine))
    assert r.facts[0].fact.edge.fact == "Alice likes Jazz music"
    # The default recipe, every branch, without errors.
    r = await kg.search("Where does Alice live?")
    assert r.facts and all(b.error is None for b in r.branches), r.branches


async def test_rollback_undoes_an_episode_at_every_time(kg: KG) -> None:
    await add(kg, t(2015), ("Alice", "LIVES_IN", "Seoul"), ("Alice", "WORKS_AT", "Naver"))
    poison = await add(kg, t(2022), ("Alice", "LIVES_IN", "Pyongyang"),
                       ("Alice", "WORKS_AT", "Evil Corp"))  # fmt: skip
    plan = await kg.rollback(poison.episode_uuid)
    assert not plan.applied and {c.object for c in plan.removed} >= {"Pyongyang", "Evil Corp"}
    assert {c.object for c in plan.restored} == {"Seoul", "Naver"}
    assert objects(await kg.facts(subject="Alice")) == ["Evil Corp", "Pyongyang"]
    done = await kg.rollback(poison.episode_uuid, apply=True)
    assert done.applied and {c.object for c in done.restored} == {"Seoul", "Naver"}
    for year in (2016, 2022, 2025):
        assert objects(await kg.facts(subject="Alice", valid_at=t(year))) == ["Naver", "Seoul"]
    again = await kg.rollback(poison.episode_uuid, apply=True)
    assert again.already_rolled_back == [poison.episode_uuid]


async def test_erasure_removes_the_subject_and_keeps_the_rest(kg: KG) -> None:
    await add(kg, t(2020), (SECRET, "LIVES_IN", "Seoul"), (SECRET, "KNOWS", "Bob"))
    await add(kg, t(2021), ("Bob", "LIVES_IN", "Busan"))
    await kg.erase_entity(SECRET)
    assert objects(await kg.facts(subject="Bob")) == ["Busan"]
    assert await kg.facts(subject=SECRET) == []
    found = await kg.search("Zebulon Quisling lives in Seoul")
    assert found.facts and all("zebulon" not in h.fact.edge.fact.lower() for h in found.facts)
    with pytest.raises(InputError, match="no entity named"):
        await kg.erase_entity(SECRET)
    await kg.erase_group("default")
    assert await kg.groups() == []


async def test_export_import_round_trip_between_backends(
    neo4j_server: Neo4jServer, tmp_path: Path, minilm: Embedder
) -> None:
    """Neo4j -> FalkorDB -> Neo4j (another group): the same history and answers each time."""
    n4 = await open_kg("neo4j", neo4j_server, tmp_path, minilm)
    falkor = await open_kg("falkordb", None, tmp_path / "f", minilm)
    try:
        await add(n4, t(2021, 3), ("Minji", "LIVES_IN", "Seoul"), ("Minji", "WORKS_AT", "Naver"))
        poison = await add(n4, t(2023), ("Minji", "LIVES_IN", "Jeju"))
        await n4.rollback(poison.episode_uuid, apply=True)
        await add(n4, t(2024, 6), ("Minji", "LIVES_IN", "Busan"), ("Jisoo", "KNOWS", "Minji"))

        async def snapshot(graph: KG, group: str) -> object:
            history = await graph.history(group_id=group, limit=1000)
            versions = sorted(
                (v.edge.uuid, v.subject, v.predicate, v.object, v.edge.valid_at,
                 v.edge.invalid_at, v.edge.expired_at, v.edge.fact_embedding is not None)
                for v in history
            )  # fmt: skip
            return (
                versions,
                objects(await graph.facts(group_id=group, valid_at=t(2023, 3))),
                (await graph.stats(group)).model_dump(exclude={"group_id"}),
            )

        original = await snapshot(n4, "default")
        lines = [line async for line in n4.export_lines()]
        await falkor.import_lines(lines)
        assert await snapshot(falkor, "default") == original
        back = [line async for line in falkor.export_lines()]
        await n4.import_lines(back, into="copy")
        assert await snapshot(n4, "copy") == original
        assert sorted(await n4.groups()) == ["copy", "default"]
    finally:
        await n4.close()
        await falkor.close()


def test_the_cli_on_neo4j(neo4j_server: Neo4jServer, tmp_path: Path) -> None:
    import neo4j
    from typer.testing import CliRunner

    from kg.cli import app

    with neo4j.GraphDatabase.driver(
        neo4j_server.uri, auth=(neo4j_server.user, neo4j_server.password)
    ) as driver:
        driver.execute_query("MATCH (n) DETACH DELETE n")

    def cli(*args: str) -> str:
        r = CliRunner().invoke(app, ["--uri", neo4j_server.kg_uri, *args])
        assert r.exit_code == 0, r.stdout + r.stderr
        return r.stdout

    episodes = tmp_path / "episodes.jsonl"
    rows = [("2021-03-02T00:00:00Z", "Seoul"), ("2024-06-01T00:00:00Z", "Busan")]
    episodes.write_text("\n".join(
        json.dumps({"source": "facts", "reference_time": ref, "facts": [
            {"subject": "Minji", "predicate": "LIVES_IN", "object": city}]})
        for ref, city in rows
    ))  # fmt: skip
    assert "ingested 2 episodes" in cli("ingest", str(episodes))
    [row] = json.loads(cli("as-of", "2023-03-15", "--subject", "Minji", "--json"))
    assert row["object"] == "Seoul"
    assert "Busan" in cli("search", "Minji lives")
    latest = json.loads(cli("log", "--json"))
    assert latest, "the audit log lists the closure of Seoul"
    assert "erased entity 'Minji'" in cli("erase", "--entity", "Minji", "--yes")
    assert json.loads(cli("facts", "--subject", "Minji", "--json")) == []


async def test_wrong_credentials_are_a_clear_error(neo4j_server: Neo4jServer) -> None:
    from kg.errors import StoreUnavailableError

    uri = neo4j_server.uri.replace("bolt://", "bolt://neo4j:not-the-password@")
    with pytest.raises(StoreUnavailableError) as err:
        await KG.open(uri)
    message = str(err.value)
    assert "refused the credentials" in message and "not-the-password" not in message
