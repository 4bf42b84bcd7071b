"""What can be checked of the Neo4j backend without a Neo4j server (tests/test_neo4j_live.py
runs it against one).

- every DML statement and read query it sends parses under an openCypher grammar;
- its DDL has the documented Neo4j 5 shape, named and idempotent;
- a write plan runs as one query in one transaction, statements in order; a read is one
  auto-commit query; errors are translated;
- DateTime values round-trip through the dialect.
What this cannot show: that a live Neo4j executes them as intended (test_neo4j_live.py does).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import neo4j
import pytest
from antlr4 import CommonTokenStream, InputStream
from antlr4.error.ErrorListener import ErrorListener
from antlr4_cypher import CypherLexer, CypherParser
from neo4j.exceptions import ClientError, ServiceUnavailable

from kg.errors import StoreError, StoreUnavailableError, WriteConflictError
from kg.ingest.structured import plan_structured_episode
from kg.schemas import DEFAULT_ONTOLOGY, Episode, FactQuery, TimelineKey, WritePlan
from kg.schemas.graph import AuditEvent, CommunityNode
from kg.schemas.metrics import QueryMetrics
from kg.schemas.plan import (
    CommunityMembership,
    CommunityPlan,
    EdgeReinforcement,
    EdgeRetirement,
    GroupVersion,
    RewritePlan,
)
from kg.schemas.search import Scope, SearchView
from kg.store.cypher.base import Fence
from kg.store.cypher.dialect import Statement
from kg.store.neo4j import Neo4jDialect, Neo4jStore
from kg.store.neo4j.ddl import NEO4J_SCHEMA, neo4j_vector_indexes
from kg.store.neo4j.fulltext import group_key
from kg.store.neo4j.store import QUEUE_LOCK
from kg.transfer import MODELS, Mention
from tests.conftest import t


class _Raise(ErrorListener):  # type: ignore[misc]
    def syntaxError(
        self, recognizer: Any, symbol: Any, line: int, col: int, msg: str, e: Any
    ) -> None:
        raise SyntaxError(f"{line}:{col} {msg}")


def parse(query: str) -> None:
    lexer = CypherLexer(InputStream(query))
    lexer.removeErrorListeners()
    lexer.addErrorListener(_Raise())
    parser = CypherParser(CommonTokenStream(lexer))
    parser.removeErrorListeners()
    parser.addErrorListener(_Raise())
    parser.script()


class FakeResult:
    """Like neo4j's AsyncResult: single() gives the first row; iterating gives them all."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    async def consume(self) -> None:
        return None

    async def single(self) -> dict[str, Any] | None:
        return self.rows[0] if self.rows else None

    def __aiter__(self) -> Any:
        return self._rows()

    async def _rows(self) -> Any:
        for row in self.rows:
            yield row


class FakeTx:
    def __init__(
        self,
        log: list[tuple[str, dict[str, Any]]],
        fail_on: str | None,
        stored: str | None,
        error: str,
    ) -> None:
        self.log, self.fail_on, self.stored, self.error = log, fail_on, stored, error

    async def run(self, query: str, params: dict[str, Any]) -> Any:
        if self.fail_on and self.fail_on in query:
            raise ClientError(self.error)
        self.log.append((query, params))
        return FakeResult([{"ok": True}])


class FakeDriver:
    """Just enough of neo4j.AsyncDriver to see how the store drives it: managed write
    transactions (`execute_write`, `execute_query` with WRITE routing, whose result
    transformer runs before the commit) and auto-commit reads (`session().run`)."""

    def __init__(self, fail_on: str | None = None, down: bool = False) -> None:
        self.transactions: list[list[tuple[str, dict[str, Any]]]] = []
        self.reads: list[tuple[str, dict[str, Any]]] = []
        self.fail_on, self.down = fail_on, down
        self.stored_version: str | None = None  # the group's version "on the server"
        self.error = "Neo.ClientError.Statement.SyntaxError: boom"  # what fail_on raises
        self.execute_query_bookmark_manager = object()
        self.session_bookmarks: list[object] = []

    def session(
        self, database: str, bookmark_manager: object = None, default_access_mode: str = "WRITE"
    ) -> Any:
        driver = self
        self.session_bookmarks.append(bookmark_manager)

        class Session:
            async def __aenter__(self) -> Any:
                return self

            async def __aexit__(self, *exc: object) -> None:
                return None

            async def run(self, query: str, params: dict[str, Any]) -> Any:
                assert default_access_mode == neo4j.READ_ACCESS  # auto-commit: reads only
                if driver.down:
                    raise ServiceUnavailable("connection refused")
                driver.reads.append((query, params))
                return FakeResult([])

            async def execute_write(self, work: Any) -> Any:
                if driver.down:
                    raise ServiceUnavailable("connection refused")
                log: list[tuple[str, dict[str, Any]]] = []
                result = await work(
                    FakeTx(log, driver.fail_on, driver.stored_version, driver.error)
                )
                driver.transactions.append(log)  # committed: work() returned
                return result

        return Session()

    async def execute_query(self, query: str, params: dict[str, Any], **kw: Any) -> Any:
        """A write in one query: its row, as the server would give it for the stored version
        (none when the version check in it fails), through the result transformer."""
        assert kw["routing_"] is neo4j.RoutingControl.WRITE
        if self.down:
            raise ServiceUnavailable("connection refused")
        if self.fail_on and self.fail_on in query:
            raise ClientError(self.error)
        passes = "WHERE kg_was" not in query or (
            self.stored_version == params["kg_expected"]
            if "$kg_expected" in query
            else self.stored_version is None
        )
        row = {
            "token": params.get("kg_token"),
            "writes": 1,
            "tx": params.get("kg_tx"),
            "hold": None,
            "ok": True,
        }
        result = await kw["result_transformer_"](FakeResult([row] if passes else []))
        self.transactions.append([(query, params)])  # committed: the transformer returned
        return result

    async def close(self) -> None:
        return None


async def _plan(store: Neo4jStore) -> WritePlan:
    episode = Episode(
        source="facts",
        reference_time=t(2020),
        facts=[
            {
                "subject": "Alice",
                "predicate": "LIVES_IN",
                "object": "Seoul",
                "subject_type": "Person",
            },
            {"subject": "Alice", "predicate": "KNOWS", "object": "Bob"},
        ],
    )
    plan, _ = await plan_structured_episode(episode, store, DEFAULT_ONTOLOGY, t(2021))
    return plan


async def _full_plan(store: Neo4jStore) -> list[Statement]:
    plan = await _plan(store)
    plan.new_edges[0].fact_embedding = [0.1, 0.2]
    plan.new_entities[0].name_embedding = [0.3, 0.4]
    plan.retirements.append(EdgeRetirement(uuid="old", expired_at=t(2021)))
    plan.reinforcements.append(EdgeReinforcement(uuid="x", episode_uuid="e", valid_at=t(2020)))
    return store.compile_plan(plan)


async def test_every_statement_the_neo4j_backend_sends_parses() -> None:
    driver = FakeDriver()
    store = Neo4jStore(driver, "neo4j", embedding_dim=None)
    statements = await _full_plan(store)
    kinds = {s.query.split()[0] for s in statements}
    assert kinds == {"CREATE", "UNWIND", "MATCH"}
    now = datetime.now(UTC)
    await store.facts(FactQuery(group_id="g", valid_at=now, known_at=now))
    await store.facts(
        FactQuery(
            group_id="g",
            valid_at=now,
            known_at=now,
            subject_key="a",
            predicate="KNOWS",
            object_key="b",
            include_contested=True,
        )
    )
    await store.history("g", "a", "KNOWS", None, 10)
    await store.stats("g", now)
    await store.groups()
    await store.has_group("g")
    await store.raw_query("g", "MATCH (n:Entity) RETURN n.uuid AS u LIMIT 1")
    await store.episode_by_hash("g", "h")
    key = TimelineKey(source_uuid="s", predicate="KNOWS", target_uuid="o")
    await store.timeline_versions("g", [key])
    await store.live_edges("g", [key])
    await store.episodes("g", ["e"])
    await store.find_episodes("g", "web", now, include_rolled_back=True)
    await store.episodes_mentioning("g", "n")
    await store.fact_versions("g", "f")
    await store.audit_log("g", 10)
    await store.closures("g", 10)
    for view in (
        SearchView(valid_at=now, known_at=now),
        SearchView(valid_at=now, known_at=now, include_history=True, include_contested=True),
    ):
        for scope in Scope:
            await store.search_text("g", scope, 'Minji 부산에 lives-in "x" AND', view, 10)
            await store.search_vector("g", scope, [0.1, 0.2], view, 10)
            await store.embeddings("g", scope, ["u"])
        await store.neighbourhood("g", ["n"], view, 10)
        await store.episodes_mentioning_any("g", ["n"], view, 10)
    await store.entities_by_uuid("g", ["n"])
    await store.mention_counts("g", ["n"])
    await store.communities("g")
    await store.communities("g", having=["n"])
    await store.ingest_metrics("g")
    await store.query_metrics("g")
    for kind in MODELS:
        await store.dump_page("g", kind, "", 10)
    texts = [p["q"] for _, p in driver.reads if "q" in p]
    # Lucene OR of plain lower-case terms, stop words dropped: the user's "AND" and quotes
    # are not syntax; the group's key required, adding nothing to the score.
    assert texts[0] == f"+group_key:{group_key('g')}^0 +(minji OR 부산에 OR lives OR 부산 OR 산에)"
    waits = [q for q, _ in driver.reads if "awaitIndexes" in q]
    assert waits == ["CALL db.awaitIndexes(300)"]  # once, before the first search
    rewrite = RewritePlan(
        group_id="g",
        delete_edges=["x"],
        new_edges=(await _plan(store)).new_edges,
        drop_mentions_from=["e"],
        orphan_candidates=["n"],
        rolled_back=["e"],
        delete_episodes=["e"],
        delete_entities=["n"],
        delete_communities=["c"],
        scrub_summaries=["Minji"],
        audit=AuditEvent(uuid="a", group_id="g", kind="rollback", created_at=now),
    )
    rewrite_statements = store.compile_rewrite(rewrite)
    assert len(rewrite_statements) == 10  # every kind of rewrite statement, no vectors
    community = CommunityNode(
        uuid="c",
        group_id="g",
        name="n",
        summary="s",
        created_at=now,
        name_embedding=[0.1, 0.2],
        episodes=["e"],
    )
    community_statements = store.compile_communities(
        CommunityPlan(
            group_id="g",
            delete=["c0"],
            create=[community],
            mark_stale=["c"],
            members=[CommunityMembership(community_uuid="c", entity_uuid="n")],
        )
    )
    assert len(community_statements) == 5  # delete, create, vectors, members, stale
    metrics = store.compile_query_metrics(
        "g", QueryMetrics(queries=1, branch_hits={"facts_bm25": 2})
    )
    assert (
        "q.hits_facts_bm25 = coalesce(q.hits_facts_bm25, 0) + $m.hits_facts_bm25" in metrics.query
    )
    plan = await _plan(store)
    loads = [
        plan.new_entities,
        [plan.episode],
        plan.new_edges,
        [Mention(uuid="m", episode="e", entity="n", created_at=now)],
        [community],
        [CommunityMembership(community_uuid="c", entity_uuid="n")],
        [AuditEvent(uuid="a", group_id="g", kind="rollback", created_at=now)],
    ]
    load_statements = [
        st
        for _kind, items in zip(MODELS, loads, strict=True)
        for st in store.compile_load("g", items)
    ]
    assert len(load_statements) >= len(MODELS)
    queries = [
        s.query
        for s in [
            *statements,
            *rewrite_statements,
            *community_statements,
            metrics,
            *load_statements,
        ]
    ]
    queries += [q for q, _ in driver.reads]
    assert len(driver.reads) >= 20
    for q in queries:
        try:
            parse(q)
        except SyntaxError as exc:  # pragma: no cover - the message is the point
            pytest.fail(f"does not parse: {q}\n{exc}")


def test_the_parser_rejects_broken_cypher() -> None:
    with pytest.raises(SyntaxError):
        parse("MATCH (n) RETURN n ORDER")


@pytest.mark.parametrize("ddl", [*NEO4J_SCHEMA, *neo4j_vector_indexes(384)])
def test_ddl_has_the_documented_neo4j5_shape(ddl: str) -> None:
    pattern = (
        r"^CREATE (CONSTRAINT|(FULLTEXT |VECTOR )?INDEX) kg_[a-z_]+ IF NOT EXISTS "
        r"FOR (\(n:[A-Z][A-Za-z]+\)|\(\)-\[e:RELATES_TO\]-\(\)) "
        r"(REQUIRE \(n\.group_id, n\.uuid\) IS UNIQUE|REQUIRE n\.group(_id)? IS UNIQUE|ON \(.+\)"
        r"|ON EACH \[.+\])"
        r"( OPTIONS \{indexConfig: .+\}\})?$"
    )
    assert re.match(pattern, ddl), ddl
    if "VECTOR" in ddl:
        assert "`vector.dimensions`: 384" in ddl and "'cosine'" in ddl
        assert "`vector.quantization.enabled`: false" in ddl  # exact scores


def test_the_docker_schema_file_is_the_ddl_kg_runs() -> None:
    text = (Path(__file__).parents[1] / "docker" / "schema.cypher").read_text()
    code = "\n".join(line for line in text.splitlines() if not line.startswith("//"))
    statements = [s.strip() for s in code.split(";") if s.strip()]
    assert statements == [*NEO4J_SCHEMA, *neo4j_vector_indexes(384)]


async def test_a_plan_is_one_query_in_one_transaction_in_order() -> None:
    """A write plan is one query (each statement a CALL {} subquery, in order) in one managed
    transaction: two round trips to the server, however many statements it has."""
    driver = FakeDriver()
    store = Neo4jStore(driver, "neo4j", embedding_dim=384)
    statements = await _full_plan(store)
    await store.execute("default", statements)
    schema, [(query, params)] = driver.transactions[:-1], driver.transactions[-1]
    assert [q for tx in schema for q, _ in tx] == [*NEO4J_SCHEMA, *neo4j_vector_indexes(384)]
    assert query == " ".join(f"CALL {{ {s.query} }}" for s in statements) + " RETURN 1 AS ok"
    for s in statements:
        assert s.params.items() <= params.items()  # every statement's parameters, merged
    # Times go to Neo4j as native datetimes, never as strings.
    assert isinstance(params["episode"]["valid_at"], datetime)
    assert params["episode"]["valid_at"].tzinfo is not None
    await store.execute("default", statements)  # schema only once per store
    assert len(driver.transactions) == len(schema) + 2
    # A single statement goes as it is.
    await store.execute("default", statements[:1])
    assert driver.transactions[-1][0][0] == statements[0].query
    # Two statements that give one parameter two values cannot share a query.
    clash = [Statement("RETURN $x", {"x": 1}), Statement("RETURN $x", {"x": 2})]
    with pytest.raises(StoreError, match=r"disagree on parameter \$x"):
        await store.execute("default", clash)


async def test_reads_are_one_round_trip_and_share_the_writes_bookmarks() -> None:
    """A read is an auto-commit query (RUN and PULL in one round trip), in a session with
    the bookmark manager the writes (`execute_query`) use: read-your-writes on a cluster."""
    driver = FakeDriver()
    store = Neo4jStore(driver, "neo4j", embedding_dim=None)
    await store.has_group("g")
    assert len(driver.reads) == 1 and not driver.transactions
    assert driver.session_bookmarks == [driver.execute_query_bookmark_manager]


async def test_neo4j_errors_become_kg_errors() -> None:
    driver = FakeDriver()
    store = Neo4jStore(driver, "neo4j", embedding_dim=None)
    await store.ensure_schema("g")  # the schema is in place; then the plan fails
    driver.fail_on = "RELATES_TO"
    with pytest.raises(StoreError, match="nothing written"):
        await store.execute("g", await _full_plan(store))
    driver = FakeDriver()
    down = Neo4jStore(driver, "neo4j", embedding_dim=None)
    await down.ensure_schema("g")
    driver.down = True
    with pytest.raises(StoreUnavailableError, match="lost the Neo4j server"):
        await down.execute("g", [Statement("RETURN 1", {})])
    with pytest.raises(StoreUnavailableError, match="lost the Neo4j server"):
        await down.has_group("g")


async def test_a_write_checks_the_group_version_first_and_rolls_back_when_stale() -> None:
    """Many writers on one server: the plan's version is checked under the group node's
    write lock, inside the plan's own transaction, before any plan statement runs; a stale
    one leaves no row, and no row rolls the transaction back."""
    driver = FakeDriver()
    store = Neo4jStore(driver, "neo4j", embedding_dim=None)
    await store.ensure_schema("g")
    committed = len(driver.transactions)
    plan = await _plan(store)
    plan.group_id = "g"
    driver.stored_version = "v1"
    plan.base = GroupVersion(token="v1")
    version = await store.apply(plan)
    [(query, params)] = driver.transactions[-1]
    assert query.startswith("MERGE (kg_g:KGGroup {group_id: $group_id}) SET kg_g.kg_lock = true ")
    lock, read = query.index("kg_g.kg_lock = true"), query.index("kg_g.version AS kg_was")
    check, first = query.index("WHERE kg_was = $kg_expected"), query.index("CALL {")
    assert lock < read < check < first  # locked, read, checked, then the plan's statements
    assert query.count("CALL {") == len(store.compile_plan(plan))
    assert params["group_id"] == "g" and params["kg_token"] == version.token
    assert params["kg_expected"] == "v1"
    assert isinstance(params["kg_tx"], datetime)  # the plan's transaction time, native
    committed += 1
    for stored, base in (
        ("v2", GroupVersion(token="v1")),
        ("v1", GroupVersion()),
        (None, GroupVersion(token="v1")),
    ):
        driver.stored_version = stored
        plan.base = base
        with pytest.raises(WriteConflictError, match="changed after this write was planned"):
            await store.apply(plan)
        assert len(driver.transactions) == committed  # raised inside: rolled back
    driver.stored_version = "anything"
    plan.base = None  # unconditional: still moves the version
    assert (await store.apply(plan)).token == driver.transactions[-1][0][1]["kg_token"]
    assert "WHERE kg_was" not in driver.transactions[-1][0][0]
    driver.stored_version = None
    plan.base = GroupVersion()  # the group's first write
    await store.apply(plan)
    assert "WHERE kg_was IS NULL" in driver.transactions[-1][0][0]
    # A write that changes queue records takes the group's queue lock first (as a leased
    # write does), so a claim cannot read a cancelled episode as ready: KGQueue, then KGGroup.
    await store.execute("g", [], Fence(None, queue=True))
    queued = driver.transactions[-1][0][0]
    assert queued.startswith(QUEUE_LOCK) and queued.index("KGQueue") < queued.index("KGGroup")
    # Dropping a group locks its version node first, so writers wait for it to commit.
    await store.drop_group("g")
    lock_stmt, delete = driver.transactions[-1]
    assert "KGGroup" in lock_stmt[0] and "kg_lock" in lock_stmt[0]
    assert "DETACH DELETE" in delete[0]
    for q in (lock_stmt[0], delete[0]):
        parse(q)


async def test_a_schema_rule_another_process_just_created_is_no_error() -> None:
    """Two kg processes' first writes race to create the same constraint: the loser's
    `IF NOT EXISTS` transaction fails at commit with EquivalentSchemaRuleAlreadyExists."""
    driver = FakeDriver(fail_on="kg_group_id")
    driver.error = "Neo.ClientError.Schema.EquivalentSchemaRuleAlreadyExists: an equivalent"
    store = Neo4jStore(driver, "neo4j", embedding_dim=None)
    await store.ensure_schema("g")
    assert len(driver.transactions) == len(NEO4J_SCHEMA) - 1  # every other rule ran
    driver = FakeDriver(fail_on="kg_group_id")  # any other refusal is still an error
    with pytest.raises(StoreError, match="SyntaxError"):
        await Neo4jStore(driver, "neo4j", embedding_dim=None).ensure_schema("g")


def test_dialect_round_trips_neo4j_datetimes() -> None:
    d = Neo4jDialect()
    value = datetime(812, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
    assert d.decode_time(neo4j.time.DateTime.from_native(d.encode_time(value))) == value
    assert d.decode_time("2024-01-01T00:00:00Z") == datetime(2024, 1, 1, tzinfo=UTC)
    with pytest.raises(StoreError):
        d.decode_time(12)


async def test_group_lookups_read_the_episodes_group_index() -> None:
    """`has_group` runs on the write and search paths: an index seek on the episodes' group,
    never a scan of every node; `groups` scans that index, not the nodes."""
    driver = FakeDriver()
    store = Neo4jStore(driver, "neo4j", embedding_dim=None)
    assert not await store.has_group("g")
    await store.groups()
    assert [q.split(" WHERE ")[0] for q, _ in driver.reads] == ["MATCH (ep:Episodic)"] * 2
    assert "LIMIT 1" in driver.reads[0][0] and driver.reads[0][1] == {"group_id": "g"}
    for q, _ in driver.reads:
        parse(q)
    index = "CREATE INDEX kg_episodic_group IF NOT EXISTS FOR (n:Episodic) ON (n.group_id)"
    assert index in NEO4J_SCHEMA


def test_exact_cosine_is_for_small_groups_the_index_answered_short() -> None:
    """Exact cosine costs what the group holds; the shared index costs about k over the
    group's share of it (kg.store.neo4j.cosine). The index's first answer is kept when it
    is whole: enough of the group's items, or all the index holds."""
    from kg.store.neo4j.cosine import EXACT_COSINE_MAX, exact_pays, index_answer_complete

    assert exact_pays(10_000) and not exact_pays(EXACT_COSINE_MAX + 1)  # the crossover
    assert index_answer_complete(hits=10, rows=30, limit=10, k=30)  # most of the index
    assert index_answer_complete(hits=3, rows=20, limit=10, k=30)  # alone: the whole index
    assert not index_answer_complete(hits=3, rows=30, limit=10, k=30)  # beside a larger one


def test_a_small_groups_index_query_is_widened_by_its_share_up_to_the_scans_cost() -> None:
    """Beside a large group, the first k (3 x the limit) held a few of a small group's items
    and sent it to the exact scan; k over the group's share holds enough of them, and past
    what an exact scan of the group costs the index is not asked for more."""
    from kg.store.cypher.search import first_k
    from kg.store.neo4j.cosine import index_k

    assert index_k(50, 10_000, 110_000) == 1_100  # 2 x 50 over a share of 1/11
    assert index_k(10, 10_000, 10_000) == first_k(10)  # alone in the index
    assert index_k(50, 10_000, 1_000_000) == 1_200  # capped: the scan is cheaper past it
    assert index_k(10, 5, 65) == first_k(10)  # a tiny group: never below the first k
