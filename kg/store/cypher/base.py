"""The base of the shared Cypher store: the transport each backend implements, the dialect it
supplies, and the mapping between models and stored property maps.

Query text is built from constant fragments: values always travel as parameters, and the only
identifiers spliced in are entity type labels that passed the ontology's validation
(re-checked by `label_suffix` in kg.store.cypher.writes).
"""

from __future__ import annotations

import abc
from datetime import datetime
from typing import Any

from kg.schemas.graph import VECTOR_FIELDS, EpisodicNode, Fact, FactEdge
from kg.store.cypher.analyzer import grams
from kg.store.cypher.dialect import Dialect, Statement

TIME_FIELDS = ("valid_at", "invalid_at", "created_at", "expired_at")
TIME_LIST_FIELDS = ("episode_valid_at",)
# Derived from the endpoints when read; never stored on the edge.
ENDPOINT_FIELDS = ("source_node_uuid", "target_node_uuid")


def with_grams(row: dict[str, Any], *fields: str) -> dict[str, Any]:
    """Add the CJK bigram field the full-text indexes also cover (see kg.store.cypher.analyzer)."""
    text = grams(" ".join(str(row.get(f) or "") for f in fields))
    if text:
        row["text_grams"] = text
    return row


class CypherBase(abc.ABC):
    """Two transport primitives, a dialect, and row mapping: what every part of the store uses."""

    backend: str
    dialect: Dialect
    embedding_dim: int | None

    @abc.abstractmethod
    async def _read(
        self, group_id: str, query: str, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Run a read query; rows as {column: value}."""

    @abc.abstractmethod
    async def execute(self, group_id: str, statements: list[Statement]) -> None:
        """Run statements as one atomic unit, in order, each seeing the previous ones' writes."""

    # -- row mapping ----------------------------------------------------------------------

    def _encode(self, model: Any, *, drop: tuple[str, ...] = ()) -> dict[str, Any]:
        row: dict[str, Any] = {}
        for key, value in model.model_dump(mode="python").items():
            if key in drop or key in VECTOR_FIELDS or value is None:
                continue
            if isinstance(value, datetime):
                value = self.dialect.encode_time(value)
            elif key in TIME_LIST_FIELDS:
                value = [self.dialect.encode_time(v) for v in value]
            elif hasattr(value, "value"):  # enums
                value = value.value
            row[key] = value
        return row

    def _decode(self, props: dict[str, Any]) -> dict[str, Any]:
        # Map projections return null for absent properties; absent means "use the default".
        row = {k: v for k, v in props.items() if k not in VECTOR_FIELDS and v is not None}
        for key in TIME_FIELDS:
            if row.get(key) is not None:
                row[key] = self.dialect.decode_time(row[key])
        for key in TIME_LIST_FIELDS:
            if row.get(key) is not None:
                row[key] = [self.dialect.decode_time(v) for v in row[key]]
        return row

    def _edge(self, props: dict[str, Any], source: str, target: str) -> FactEdge:
        return FactEdge.model_validate(
            {**self._decode(props), "source_node_uuid": source, "target_node_uuid": target}
        )

    def _fact(self, row: dict[str, Any]) -> Fact:
        edge = self._edge(row["e"], row["source"], row["target"])
        return Fact(subject=row["subject"], predicate=edge.name, object=row["object"], edge=edge)

    def _episodes(self, rows: list[dict[str, Any]]) -> list[EpisodicNode]:
        return [EpisodicNode.model_validate(self._decode(r["ep"])) for r in rows]
