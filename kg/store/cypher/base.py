"""The base of the shared Cypher store: the transport each backend implements, the dialect it
supplies, and the mapping between models and stored property maps.

Query text is built from constant fragments: values always travel as parameters, and the only
identifiers spliced in are entity type labels that passed the ontology's validation
(re-checked by `label_suffix` in kg.store.cypher.writes).
"""

from __future__ import annotations

import abc
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel

from kg.errors import WriteConflictError
from kg.schemas.graph import VECTOR_FIELDS, EpisodicNode, Fact, FactEdge
from kg.schemas.plan import GroupVersion
from kg.store.cypher.analyzer import grams
from kg.store.cypher.dialect import Dialect, Guard, Statement

TIME_FIELDS = (
    "valid_at",
    "invalid_at",
    "created_at",
    "expired_at",
    "queued_at",
    "next_attempt_at",
    "lease_expires_at",
)
TIME_LIST_FIELDS = ("episode_valid_at",)
# Derived from the endpoints when read; never stored on the edge.
ENDPOINT_FIELDS = ("source_node_uuid", "target_node_uuid")


# The per-group node that versions its writes (see `Fence`). Not a record kind: it is never
# exported, searched or counted, and it carries no user data.
GROUP_LABEL = "KGGroup"
VERSION_QUERY = (
    f"MATCH (g:{GROUP_LABEL} {{group_id: $group_id}}) "
    "RETURN g.version AS token, g.writes AS writes, g.tx AS tx, g.hold AS hold"
)

# Episodes kg wrote before search keys (kg.search_keys) have none: the episode indexes cover
# the key, so each is given its content as its key (and the content's embedding as the
# key's), once, when a process first sets up the group's schema, a page at a time. A read
# says whether any is left, so a keyed store writes nothing. Graphs another tool wrote (no
# `extractor`) get keys when adopted. Unversioned, like the query counters: no plan reads a
# key. The vector travels through a parameter: FalkorDB's vector index does not see a
# property copied from another, and its vecf32() does not take a stored vector.
KEYLESS = (
    "MATCH (ep:Episodic) WHERE ep.search_key IS NULL AND ep.extractor IS NOT NULL "
    "AND ep.source <> 'facts'"
)
KEYLESS_PAGE = f"{KEYLESS} RETURN ep.uuid AS uuid, ep.content_embedding AS v LIMIT 500"


def key_backfill(dialect: Dialect, rows: list[dict[str, Any]]) -> list[Statement]:
    """The statements that key one page of KEYLESS_PAGE rows by their content."""
    match = "UNWIND $rows AS r MATCH (ep:Episodic {uuid: r.uuid}) WHERE ep.search_key IS NULL "
    text = "ep.search_key = coalesce(ep.content, '')"
    vectors = [{"uuid": r["uuid"], "v": [float(x) for x in r["v"]]} for r in rows if r["v"]]
    plain = [{"uuid": r["uuid"]} for r in rows if not r["v"]]
    out = [Statement(f"{match}SET {text}", {"rows": plain})] if plain else []
    if vectors:
        vector = dialect.vector("r.v")
        out.append(Statement(f"{match}SET {text}, ep.key_embedding = {vector}", {"rows": vectors}))
    return out


@dataclass(frozen=True)
class Fence:
    """What every write of a group carries, checked and applied inside its atomic unit: the
    version it was planned at (`base`; None writes unconditionally), and the new version it
    makes current. A write whose base is no longer current writes nothing."""

    base: GroupVersion | None
    tx: Any = None  # the write's transaction time, already encoded by the dialect
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    set_hold: bool = False
    hold: str | None = None
    # The write changes queue records (cancels or deletes queued episodes): it must be
    # serialised with claims and leased writes. One FalkorDB query is already; Neo4j takes
    # the group's queue lock first.
    queue: bool = False

    @property
    def checked(self) -> bool:
        return self.base is not None

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"kg_token": self.token, "kg_tx": self.tx}
        if self.base is not None and self.base.token is not None:
            p["kg_expected"] = self.base.token
        if self.set_hold:
            p["kg_hold"] = self.hold
        return p

    def assignments(self, var: str) -> str:
        """The SET list that makes this write's version current on node `var`."""
        sets = (
            f"{var}.version = $kg_token, {var}.writes = coalesce({var}.writes, 0) + 1, "
            f"{var}.tx = CASE WHEN $kg_tx IS NOT NULL AND ({var}.tx IS NULL OR $kg_tx > "
            f"{var}.tx) THEN $kg_tx ELSE {var}.tx END"
        )
        return sets + (f", {var}.hold = $kg_hold" if self.set_hold else "")

    def conflict(self, group_id: str) -> WriteConflictError:
        return WriteConflictError(
            f"group {group_id!r} changed after this write was planned (another writer); "
            "nothing written"
        )


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
    async def execute(
        self,
        group_id: str,
        statements: list[Statement],
        fence: Fence | None = None,
        guard: Guard | None = None,
    ) -> GroupVersion | None:
        """Run statements as one atomic unit, in order, each seeing the previous ones' writes.
        With a `fence`, the unit first checks and moves the group's version (raising
        WriteConflictError, nothing written, if its base is stale) and returns the new one.
        With a `guard`, only if it holds inside that same unit (else LeaseLostError, nothing
        written): a leased write checks its lease and the version together."""

    @abc.abstractmethod
    async def _queue_write(self, group_id: str, statement: Statement) -> list[dict[str, Any]]:
        """Run one write statement atomically, serialised with the group's other queue
        transitions (claims, enqueues, leased writes); its rows."""

    def _group_version(self, row: dict[str, Any] | None) -> GroupVersion:
        if row is None or row.get("token") is None:
            return GroupVersion()
        tx = row.get("tx")
        return GroupVersion(
            token=row["token"],
            writes=int(row.get("writes") or 0),
            hold=row.get("hold"),
            last_tx=self.dialect.decode_time(tx) if tx is not None else None,
        )

    async def version(self, group_id: str) -> GroupVersion:
        rows = await self._read(group_id, VERSION_QUERY, {"group_id": group_id})
        return self._group_version(rows[0] if rows else None)

    # -- row mapping ----------------------------------------------------------------------

    def _encode(self, model: BaseModel, *, drop: tuple[str, ...] = ()) -> dict[str, Any]:
        """A stored model's properties, in field order: times encoded, enums as their values,
        absent (None) and vector fields left out. The stored models are flat (scalars, enums,
        times and lists of them), so their fields are read directly, the common types first:
        `model_dump` walked and copied the same values at about twice the cost, and these
        rows are the bulk of a write."""
        encode_time = self.dialect.encode_time
        row: dict[str, Any] = {}
        for key, value in model.__dict__.items():
            if value is None or key in drop:
                continue
            kind = type(value)
            if kind is str or kind is int or kind is float or kind is bool:
                row[key] = value
            elif kind is datetime:
                row[key] = encode_time(value)
            elif isinstance(value, Enum):
                row[key] = value.value
            elif isinstance(value, list):
                if key in VECTOR_FIELDS:
                    continue
                timed = key in TIME_LIST_FIELDS
                row[key] = [encode_time(v) for v in value] if timed else list(value)
            elif isinstance(value, datetime):
                row[key] = encode_time(value)
            elif isinstance(value, str | int | float):
                row[key] = value
            else:
                raise TypeError(f"{type(model).__name__}.{key} is not a flat property")
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
