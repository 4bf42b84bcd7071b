"""Neo4j's side of the shared Cypher: native DateTime, plain lists as vectors, named Lucene
full-text and vector indexes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from kg.errors import StoreError
from kg.schemas.search import Scope
from kg.store.cypher.dialect import Dialect
from kg.store.neo4j import fulltext


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

    def index_hint(self, var: str, label: str, properties: tuple[str, ...]) -> str:
        return f" USING INDEX {var}:{label}({', '.join(properties)})"

    def in_group(self, group_id: str, query: str) -> str:
        return fulltext.in_group(group_id, query)  # one index for all groups: its key

    def text_query(self, terms: list[str], optional: Sequence[str] = ()) -> str:
        # Lucene; terms are plain lower-case words (analyzer). Clauses without '+' are
        # optional once one has it.
        required = " OR ".join(terms)
        if not optional:
            return required
        return f"+({required}) " + " ".join(optional)


_INDEXES = {
    Scope.facts: ("kg_fact_text", "e"),
    Scope.entities: ("kg_entity_text", "n"),
    Scope.episodes: ("kg_episode_search_text", "ep"),
    Scope.communities: ("kg_community_text", "c"),
}
_VECTOR_INDEXES = {
    Scope.facts: ("kg_fact_embedding", "e"),
    Scope.entities: ("kg_entity_embedding", "n"),
    Scope.episodes: ("kg_episode_key_embedding", "ep"),
    Scope.communities: ("kg_community_embedding", "c"),
}
