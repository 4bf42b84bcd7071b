"""Neo4j 5 backend over Bolt: everything Neo4j-specific lives in this module and schemas/ddl.py.

One database for all groups, each node and edge filtered by `group_id` (indexed together with
the property that anchors each query). Times are native DateTime; a write plan runs as one
explicit transaction. Not run against a live server in CI: see README "What was verified".
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse, urlunparse

from kg.errors import StoreError, StoreUnavailableError
from kg.schemas.ddl import NEO4J_SCHEMA, neo4j_vector_indexes
from kg.schemas.search import Scope
from kg.store.cypher import CypherStore, Statement
from kg.store.cypher_search import Dialect

NEO4J_SCHEMES = ("bolt", "bolt+s", "bolt+ssc", "neo4j", "neo4j+s", "neo4j+ssc")


class Neo4jDialect(Dialect):
    name = "neo4j"
    engine_scorer = "bm25"  # Lucene's full-text scoring is BM25 already

    def encode_time(self, value: datetime) -> datetime:
        return value.astimezone(UTC)

    def decode_time(self, value: Any) -> datetime:
        if hasattr(value, "to_native"):
            value = value.to_native()
        if isinstance(value, str):  # graphs written by other tools may hold ISO strings
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if not isinstance(value, datetime):
            raise StoreError(f"expected a DateTime from Neo4j, got {type(value).__name__}")
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)

    def vector(self, expr: str) -> str:
        return expr

    def fulltext_call(self, scope: Scope) -> str:
        index, var = _INDEXES[scope]
        kind = "Relationships" if scope is Scope.facts else "Nodes"
        yielded = "relationship" if scope is Scope.facts else "node"
        return f"CALL db.index.fulltext.query{kind}('{index}', $q) YIELD {yielded} AS {var}, score"

    def vector_call(self, scope: Scope) -> str:
        index, var = _VECTOR_INDEXES[scope]
        kind = "Relationships" if scope is Scope.facts else "Nodes"
        yielded = "relationship" if scope is Scope.facts else "node"
        return (
            f"CALL db.index.vector.query{kind}('{index}', $k, $v) YIELD {yielded} AS {var}, score"
        )

    def similarity(self, score: float) -> float:
        return 2.0 * score - 1.0  # Neo4j's cosine score is (1 + cos) / 2

    def text_query(self, terms: list[str]) -> str:
        return " OR ".join(terms)  # Lucene; terms are plain lower-case words (analyzer)


_INDEXES = {
    Scope.facts: ("kg_fact_text", "e"),
    Scope.entities: ("kg_entity_text", "n"),
    Scope.episodes: ("kg_episode_text", "ep"),
    Scope.communities: ("kg_community_text", "c"),
}
_VECTOR_INDEXES = {
    Scope.facts: ("kg_fact_embedding", "e"),
    Scope.entities: ("kg_entity_embedding", "n"),
    Scope.episodes: ("kg_episode_embedding", "ep"),
    Scope.communities: ("kg_community_embedding", "c"),
}


class Neo4jStore(CypherStore):
    backend = "neo4j"
    dialect = Neo4jDialect()

    def __init__(self, driver: Any, database: str, embedding_dim: int | None) -> None:
        self._driver = driver
        self._database = database
        self.embedding_dim = embedding_dim
        self._schema_ready = False
        self._indexes_online = False

    @classmethod
    async def connect(cls, uri: str, *, embedding_dim: int | None = None) -> Neo4jStore:
        import neo4j
        from neo4j.exceptions import AuthError, ServiceUnavailable

        u = urlparse(uri)
        user = u.username or os.environ.get("NEO4J_USER", "neo4j")
        password = u.password or os.environ.get("NEO4J_PASSWORD", "")
        database = u.path.strip("/") or os.environ.get("NEO4J_DATABASE", "neo4j")
        netloc = u.hostname or "localhost"
        if u.port:
            netloc += f":{u.port}"
        bare = urlunparse((u.scheme, netloc, "", "", "", ""))
        driver = neo4j.AsyncGraphDatabase.driver(bare, auth=(user, password))
        try:
            await driver.verify_connectivity()
        except (ServiceUnavailable, AuthError, OSError, ValueError) as exc:
            await driver.close()
            raise StoreUnavailableError(f"cannot reach Neo4j at {bare}: {exc}") from exc
        return cls(driver, database, embedding_dim)

    async def ensure_schema(self, group_id: str) -> None:
        if self._schema_ready:
            return
        ddl = list(NEO4J_SCHEMA)
        if self.embedding_dim:
            ddl += neo4j_vector_indexes(self.embedding_dim)
        for stmt in ddl:
            await self._run_write([Statement(stmt, {})])
        self._schema_ready = True

    async def _read(
        self, group_id: str, query: str, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        import neo4j

        try:
            records, _, _ = await self._driver.execute_query(
                query, params, database_=self._database, routing_=neo4j.RoutingControl.READ
            )
        except Exception as exc:
            raise self._translate(exc) from exc
        return [dict(r) for r in records]

    async def _write(self, group_id: str, statements: list[Statement]) -> None:
        await self.ensure_schema(group_id)
        await self._run_write(statements)

    async def _run_write(self, statements: list[Statement]) -> None:
        async def work(tx: Any) -> None:
            for s in statements:
                result = await tx.run(s.query, s.params)
                await result.consume()

        try:
            # Writes share the bookmarks of execute_query's reads: on a cluster, the next read
            # (possibly on another member) waits for this write. Read-your-writes holds.
            async with self._driver.session(
                database=self._database,
                bookmark_manager=self._driver.execute_query_bookmark_manager,
            ) as session:
                await session.execute_write(work)
        except Exception as exc:
            raise self._translate(exc) from exc

    @staticmethod
    def _translate(exc: Exception) -> Exception:
        from neo4j.exceptions import Neo4jError, ServiceUnavailable, SessionExpired

        if isinstance(exc, ServiceUnavailable | SessionExpired | OSError):
            return StoreUnavailableError(f"lost the Neo4j server: {exc}")
        if isinstance(exc, Neo4jError):
            return StoreError(f"Neo4j refused the query (nothing written): {exc}")
        return exc

    async def _search_ready(self, group_id: str) -> None:
        """Neo4j populates new indexes in the background; wait once per store."""
        if self._indexes_online:
            return
        await self._read(group_id, "CALL db.awaitIndexes(300)", {})
        self._indexes_online = True

    async def drop_group(self, group_id: str) -> None:
        await self._run_write(
            [Statement("MATCH (n) WHERE n.group_id = $group_id DETACH DELETE n",
                       {"group_id": group_id})]
        )  # fmt: skip

    async def compact(self) -> None:
        """Neo4j reuses the space of deleted records; it offers no online way to scrub them
        from store files (offline: neo4j-admin database copy). Documented in the README."""

    async def groups(self) -> list[str]:
        rows = await self._read(
            "",
            "MATCH (n) WHERE n:Episodic OR n:Entity RETURN DISTINCT n.group_id AS g ORDER BY g",
            {},
        )
        return [r["g"] for r in rows if r["g"] is not None]

    async def close(self) -> None:
        await self._driver.close()
