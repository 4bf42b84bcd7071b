"""FalkorDB's side of the shared Cypher: times as fixed-width UTC strings, vecf32 vectors,
RediSearch full-text and FalkorDB's vector procedures."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from kg.schemas.search import Scope
from kg.store.cypher.dialect import Dialect


@lru_cache(maxsize=4096)  # a plan repeats its transaction time on every row it writes
def _encode_time(value: datetime) -> str:
    v = value.astimezone(UTC)
    return (
        f"{v.year:04d}-{v.month:02d}-{v.day:02d}T{v.hour:02d}:{v.minute:02d}:"
        f"{v.second:02d}.{v.microsecond:06d}Z"
    )


class FalkorDialect(Dialect):
    name = "falkordb"

    def encode_time(self, value: datetime) -> str:
        """Fixed width, years before 1000 zero-padded (glibc's strftime('%Y') does not)."""
        return _encode_time(value)

    def decode_time(self, value: Any) -> datetime:
        # fromisoformat reads the fixed-width 'Z' form directly, ~10x faster than strptime.
        return datetime.fromisoformat(value)

    def vector(self, expr: str) -> str:
        return f"vecf32({expr})"

    def fulltext_call(self, scope: Scope) -> str:
        if scope is Scope.facts:
            return (
                "CALL db.idx.fulltext.queryRelationships('RELATES_TO', $q) "
                "YIELD relationship AS e, score"
            )
        label, var = _NODES[scope]
        return f"CALL db.idx.fulltext.queryNodes('{label}', $q) YIELD node AS {var}, score"

    def vector_call(self, scope: Scope) -> str:
        if scope is Scope.facts:
            return (
                "CALL db.idx.vector.queryRelationships('RELATES_TO', 'fact_embedding', $k, "
                "vecf32($v)) YIELD relationship AS e, score"
            )
        label, var = _NODES[scope]
        prop = "key_embedding" if scope is Scope.episodes else "name_embedding"
        return (
            f"CALL db.idx.vector.queryNodes('{label}', '{prop}', $k, vecf32($v)) "
            f"YIELD node AS {var}, score"
        )

    def similarity(self, score: float) -> float:
        return 1.0 - score  # FalkorDB yields the cosine distance

    def text_query(self, terms: list[str], optional: Sequence[str] = ()) -> str:
        # RediSearch: '|' is OR, '~' an optional term; terms are plain words (analyzer).
        required = " | ".join(terms)
        if not optional:
            return required
        return f"({required}) " + " ".join(f"~{t}" for t in optional)


_NODES = {
    Scope.entities: ("Entity", "n"),
    Scope.episodes: ("Episodic", "ep"),
    Scope.communities: ("Community", "c"),
}
