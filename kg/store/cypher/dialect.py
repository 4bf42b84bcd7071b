"""What each backend supplies to the shared Cypher: time and vector encoding, index procedures.

Also the statement type the shared code compiles plans into, and the predicate form both
backends need for range filters on stored properties.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kg.schemas.search import Scope


@dataclass(frozen=True)
class Statement:
    query: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Guard:
    """A condition a whole write depends on, checked inside its atomic unit: when it does not
    hold, nothing is written. `match` is a MATCH ... WHERE binding `kg_guard` when the
    condition holds (FalkorDB runs it as the query's first clause, so a miss leaves no row
    for the rest to run on; Neo4j runs it first in the transaction, after the group's queue
    lock, and rolls back on a miss)."""

    match: str
    params: dict[str, Any]
    failure: str  # the message of the LeaseLostError raised when it does not hold


class Dialect(abc.ABC):
    name: str

    @abc.abstractmethod
    def encode_time(self, value: datetime) -> Any: ...

    @abc.abstractmethod
    def decode_time(self, value: Any) -> datetime: ...

    @abc.abstractmethod
    def vector(self, expr: str) -> str:
        """Wrap a list expression so the backend stores it as an indexable vector."""

    @abc.abstractmethod
    def fulltext_call(self, scope: Scope) -> str:
        """`CALL ... YIELD <var>, score` over the scope's full-text index, query in $q."""

    @abc.abstractmethod
    def vector_call(self, scope: Scope) -> str:
        """`CALL ... YIELD <var>, score` over the scope's vector index, $k nearest to $v."""

    @abc.abstractmethod
    def similarity(self, score: float) -> float:
        """The vector procedure's score as cosine similarity."""

    @abc.abstractmethod
    def text_query(self, terms: list[str], optional: Sequence[str] = ()) -> str:
        """Plain terms, OR-ed, in the engine's query syntax; a match needs one of `terms`,
        and each `optional` term it also holds only raises its score."""

    def in_group(self, group_id: str, query: str) -> str:
        """A full-text `query` (from `text_query`) that matches the group's items only, scored
        as before; as it is where an index holds one group (FalkorDB: a graph per group)."""
        return query

    def index_hint(self, var: str, label: str, properties: tuple[str, ...]) -> str:
        """A clause that makes the planner find `var` through the index on `label`'s
        `properties` (appended to a MATCH pattern); empty where the engine takes no hints."""
        return ""

    # "bm25" when the full-text engine already ranks by BM25 (Lucene); otherwise kg rescores.
    engine_scorer: str = "tfidf"


def unindexed(expr: str) -> str:
    """`expr` in a form no index can serve. FalkorDB 4.16's range indexes keep an entry for a
    deleted node or edge, and a new one that reuses its internal id is then returned by range
    queries matching the *old* value. kg creates no range-queried index, but graphs written
    by other tools (graphiti-core indexes every time property) have them; so every range
    predicate on a stored property is evaluated on the value itself."""
    return f"coalesce({expr}, {expr})"


def check_dimension(dimension: int) -> int:
    if not isinstance(dimension, int) or isinstance(dimension, bool) or not 1 <= dimension <= 4096:
        raise ValueError(f"embedding dimension must be an integer in 1..4096, got {dimension!r}")
    return dimension
