"""FalkorDB indexes and unique constraints, as data that renders to Cypher.

Only trusted constants and validated integers are interpolated here; no user input reaches DDL.
They are data so that the store can compare them with what a graph already has
(`db.indexes()`, `db.constraints()`) and send only what is missing: every DDL command sent
lands in the append-only file, and FalkorDB replays (and re-logs) each one at every start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kg.store.cypher.dialect import check_dimension


@dataclass(frozen=True)
class IndexSpec:
    kind: Literal["RANGE", "FULLTEXT", "VECTOR"]
    label: str
    properties: tuple[str, ...]
    relationship: bool = False
    options: str = ""

    @property
    def cypher(self) -> str:
        kind = "" if self.kind == "RANGE" else f"{self.kind} "
        var = "e" if self.relationship else "n"
        pattern = f"()-[e:{self.label}]-()" if self.relationship else f"(n:{self.label})"
        props = ", ".join(f"{var}.{p}" for p in self.properties)
        opts = f" OPTIONS {self.options}" if self.options else ""
        return f"CREATE {kind}INDEX FOR {pattern} ON ({props}){opts}"

    def missing_from(self, existing: list[dict[str, Any]]) -> bool:
        """Whether a graph whose `db.indexes()` rows are `existing` lacks any property of
        this index (of this kind, on this label and entity type)."""
        entity = "RELATIONSHIP" if self.relationship else "NODE"
        have: set[str] = set()
        for row in existing:
            if row.get("label") != self.label or row.get("entitytype") != entity:
                continue
            types = row.get("types") or {}
            have |= {p for p, kinds in types.items() if self.kind in (kinds or [])}
        return not set(self.properties) <= have


# FalkorDB keeps one graph per group, so group_id needs no index there. Unique constraints
# need an exact-match index first; they are created with GRAPH.CONSTRAINT (see the store).
FALKORDB_INDEXES: tuple[IndexSpec, ...] = (
    IndexSpec("RANGE", "Entity", ("uuid",)),
    IndexSpec("RANGE", "Entity", ("name_key",)),
    IndexSpec("RANGE", "Episodic", ("uuid",)),
    IndexSpec("RANGE", "Episodic", ("content_hash",)),
    # The background queue (kg.store.cypher.queue): equality lookups only.
    IndexSpec("RANGE", "Episodic", ("status",)),
    IndexSpec("RANGE", "Episodic", ("idempotency_key",)),
    IndexSpec("RANGE", "Episodic", ("session_id",)),
    IndexSpec("RANGE", "Community", ("uuid",)),
    IndexSpec("RANGE", "KGGroup", ("group_id",)),
    IndexSpec("RANGE", "RELATES_TO", ("uuid",), relationship=True),
    IndexSpec("RANGE", "RELATES_TO", ("fact_uuid",), relationship=True),
    IndexSpec("RANGE", "RELATES_TO", ("name",), relationship=True),
    # text_grams: CJK bigrams written beside the text (kg.store.cypher.analyzer), so particles and
    # endings attached without a space do not hide a word from the index.
    IndexSpec("FULLTEXT", "Entity", ("name", "summary", "text_grams")),
    # An episode is found by its search key (kg.search_keys), not its content alone.
    IndexSpec("FULLTEXT", "Episodic", ("search_key", "text_grams")),
    IndexSpec("FULLTEXT", "Community", ("name", "summary", "text_grams")),
    IndexSpec("FULLTEXT", "RELATES_TO", ("fact", "text_grams"), relationship=True),
)

# (label, property) pairs that get a unique constraint on FalkorDB.
FALKORDB_UNIQUE: tuple[tuple[str, str], ...] = (
    ("Entity", "uuid"),
    ("Episodic", "uuid"),
    ("Community", "uuid"),
    ("KGGroup", "group_id"),  # the version node: one per group (kg.store.cypher.base.Fence)
)


def falkordb_vector_indexes(dimension: int) -> tuple[IndexSpec, ...]:
    dim = check_dimension(dimension)
    opts = f"{{dimension: {dim}, similarityFunction: 'cosine'}}"
    return (
        IndexSpec("VECTOR", "Entity", ("name_embedding",), options=opts),
        IndexSpec("VECTOR", "Community", ("name_embedding",), options=opts),
        IndexSpec("VECTOR", "Episodic", ("key_embedding",), options=opts),
        IndexSpec("VECTOR", "RELATES_TO", ("fact_embedding",), relationship=True, options=opts),
    )
