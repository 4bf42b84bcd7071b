"""The Cypher both backends share, and the mapping between models and rows.

Backends differ only in transport, in how time and vectors are stored, and in DDL; each
supplies those through a small `Dialect`. Query text here is built from constant fragments:
values always travel as parameters, and the only identifiers spliced in are entity type labels
that passed the ontology's validation (re-checked by `_label_suffix`).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kg.schemas.graph import AuditEvent, CommunityNode, EntityNode, EpisodicNode, Fact, FactEdge
from kg.schemas.metrics import Counters, IngestMetrics, QueryMetrics, valid_branch_key
from kg.schemas.plan import CommunityPlan, RewritePlan, WritePlan
from kg.schemas.store import Community, FactQuery, StoreStats, TimelineKey
from kg.schemas.validation import TYPE_NAME_RE
from kg.store.analyzer import grams
from kg.store.cypher_search import (
    COMMUNITY_COLUMNS,
    VECTOR_FIELDS,
    CypherSearch,
    Dialect,
    unindexed,
)

_SUMMED = tuple(Counters.model_fields)
_QUERY_COUNTERS = ("queries", "zero_result_queries", "branch_errors", "latency_ms_total",
                   "contexts", "context_tokens")  # fmt: skip
# Keyset pages use the uuid index; each row is re-checked on its own value (see `unindexed`)
# and de-duplicated, since a stale index entry can return a row twice.
_NODE_PAGE = (
    "MATCH (x:{label}) WHERE x.group_id = $group_id AND x.uuid > $after "
    f"AND {unindexed('x.uuid')} > $after "
    "RETURN properties(x) AS p ORDER BY x.uuid LIMIT $page_size"
)
_DUMP = {
    "entities": _NODE_PAGE.format(label="Entity"),
    "episodes": _NODE_PAGE.format(label="Episodic"),
    "communities": _NODE_PAGE.format(label="Community"),
    "audit": _NODE_PAGE.format(label="AuditEvent"),
    "edges": "MATCH (s:Entity)-[x:RELATES_TO]->(o:Entity) WHERE x.group_id = $group_id "
    f"AND x.uuid > $after AND {unindexed('x.uuid')} > $after "
    "RETURN properties(x) AS p, s.uuid AS source, o.uuid AS target "
    "ORDER BY x.uuid LIMIT $page_size",
    "mentions": "MATCH (ep:Episodic)-[m:MENTIONS]->(n:Entity) WHERE m.group_id = $group_id "
    f"AND {unindexed('m.uuid')} > $after "
    "RETURN m.uuid AS uuid, ep.uuid AS episode, n.uuid AS entity, "
    "m.created_at AS created_at ORDER BY m.uuid LIMIT $page_size",
    "members": "MATCH (c:Community)-[m:HAS_MEMBER]->(n:Entity) WHERE c.group_id = $group_id "
    "AND c.uuid + ':' + n.uuid > $after RETURN c.uuid + ':' + n.uuid AS uuid, "
    "c.uuid AS community_uuid, n.uuid AS entity_uuid ORDER BY uuid LIMIT $page_size",
}
_PATCH = {
    "entities": ("(n:Entity {uuid: r.uuid})", "n", "name_embedding"),
    "episodes": ("(n:Episodic {uuid: r.uuid})", "n", "content_embedding"),
    "edges": ("()-[n:RELATES_TO {uuid: r.uuid}]->()", "n", "fact_embedding"),
}
TIME_FIELDS = ("valid_at", "invalid_at", "created_at", "expired_at")
TIME_LIST_FIELDS = ("episode_valid_at",)
# Derived from the endpoints when read; never stored on the edge.
ENDPOINT_FIELDS = ("source_node_uuid", "target_node_uuid")


@dataclass(frozen=True)
class Statement:
    query: str
    params: dict[str, Any]


def _label_suffix(labels: list[str]) -> str:
    for label in labels:
        if not TYPE_NAME_RE.match(label):
            raise ValueError(f"refusing to use {label!r} as a Cypher label")
    return "".join(f":{label}" for label in sorted(set(labels)))


def _with_grams(row: dict[str, Any], *fields: str) -> dict[str, Any]:
    """Add the CJK bigram field the full-text indexes also cover (see kg.store.analyzer)."""
    text = grams(" ".join(str(row.get(f) or "") for f in fields))
    if text:
        row["text_grams"] = text
    return row


class CypherStore(CypherSearch, abc.ABC):
    """Implements `kg.schemas.store.GraphStore` on top of two transport primitives."""

    backend: str
    dialect: Dialect

    @abc.abstractmethod
    async def _read(
        self, group_id: str, query: str, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Run a read query; rows as {column: value}."""

    @abc.abstractmethod
    async def _write(self, group_id: str, statements: list[Statement]) -> None:
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

    # -- reads ----------------------------------------------------------------------------

    async def episode_by_hash(self, group_id: str, content_hash: str) -> EpisodicNode | None:
        rows = await self._read(
            group_id,
            "MATCH (ep:Episodic {content_hash: $hash}) WHERE ep.group_id = $group_id "
            "RETURN properties(ep) AS ep LIMIT 1",
            {"hash": content_hash, "group_id": group_id},
        )
        return self._episodes(rows)[0] if rows else None

    async def entities_by_key(self, group_id: str, name_keys: list[str]) -> list[EntityNode]:
        if not name_keys:
            return []
        rows = await self._read(
            group_id,
            "UNWIND $keys AS k MATCH (n:Entity {name_key: k}) WHERE n.group_id = $group_id "
            "RETURN properties(n) AS n ORDER BY n.created_at, n.uuid",
            {"keys": name_keys, "group_id": group_id},
        )
        first: dict[str, EntityNode] = {}
        for r in rows:
            node = EntityNode.model_validate(self._decode(r["n"]))
            first.setdefault(node.name_key, node)
        return list(first.values())

    async def live_edges(self, group_id: str, keys: list[TimelineKey]) -> list[FactEdge]:
        return await self._timeline(group_id, keys, live_only=True)

    async def timeline_versions(self, group_id: str, keys: list[TimelineKey]) -> list[FactEdge]:
        return await self._timeline(group_id, keys, live_only=False)

    async def _timeline(
        self, group_id: str, keys: list[TimelineKey], *, live_only: bool
    ) -> list[FactEdge]:
        if not keys:
            return []
        live = "AND e.expired_at IS NULL " if live_only else ""
        rows = await self._read(
            group_id,
            "UNWIND $keys AS k MATCH (s:Entity {uuid: k.source})-[e:RELATES_TO]->(o:Entity) "
            f"WHERE e.group_id = $group_id AND e.name = k.predicate {live}"
            "AND (k.target IS NULL OR o.uuid = k.target) "
            "RETURN DISTINCT properties(e) AS e, s.uuid AS source, o.uuid AS target",
            {
                "keys": [
                    {"source": k.source_uuid, "predicate": k.predicate, "target": k.target_uuid}
                    for k in dict.fromkeys(keys)
                ],
                "group_id": group_id,
            },
        )
        return [self._edge(r["e"], r["source"], r["target"]) for r in rows]

    def _episodes(self, rows: list[dict[str, Any]]) -> list[EpisodicNode]:
        return [EpisodicNode.model_validate(self._decode(r["ep"])) for r in rows]

    async def episodes(self, group_id: str, uuids: list[str]) -> list[EpisodicNode]:
        if not uuids:
            return []
        rows = await self._read(
            group_id,
            "UNWIND $uuids AS u MATCH (ep:Episodic {uuid: u}) WHERE ep.group_id = $group_id "
            "RETURN properties(ep) AS ep ORDER BY ep.created_at, ep.uuid",
            {"uuids": sorted(set(uuids)), "group_id": group_id},
        )
        return self._episodes(rows)

    async def find_episodes(
        self,
        group_id: str,
        source_description: str | None,
        since: datetime | None,
        *,
        include_rolled_back: bool = False,
    ) -> list[EpisodicNode]:
        where = ["ep.group_id = $group_id"]
        if not include_rolled_back:
            where.append("ep.status = 'ingested'")
        params: dict[str, Any] = {"group_id": group_id}
        if source_description is not None:
            where.append("ep.source_description = $source_description")
            params["source_description"] = source_description
        if since is not None:
            where.append(f"{unindexed('ep.created_at')} >= $since")
            params["since"] = self.dialect.encode_time(since)
        rows = await self._read(
            group_id,
            "MATCH (ep:Episodic) WHERE " + " AND ".join(where) + " "
            "RETURN properties(ep) AS ep ORDER BY ep.created_at, ep.uuid",
            params,
        )
        return self._episodes(rows)

    async def recent_episodes(self, group_id: str, limit: int) -> list[EpisodicNode]:
        rows = await self._read(
            group_id,
            "MATCH (ep:Episodic) WHERE ep.group_id = $group_id AND ep.status = 'ingested' "
            "RETURN properties(ep) AS ep ORDER BY ep.valid_at DESC, ep.created_at DESC "
            "LIMIT $max_rows",
            {"group_id": group_id, "max_rows": limit},
        )
        return list(reversed(self._episodes(rows)))

    async def episodes_mentioning(self, group_id: str, entity_uuid: str) -> list[EpisodicNode]:
        rows = await self._read(
            group_id,
            "MATCH (ep:Episodic)-[:MENTIONS]->(n:Entity {uuid: $entity}) "
            "WHERE ep.group_id = $group_id "
            "RETURN properties(ep) AS ep ORDER BY ep.created_at, ep.uuid",
            {"entity": entity_uuid, "group_id": group_id},
        )
        return self._episodes(rows)

    async def fact_versions(self, group_id: str, uuid: str) -> list[Fact]:
        rows = await self._read(
            group_id,
            "MATCH ()-[x:RELATES_TO {uuid: $uuid}]->() WHERE x.group_id = $group_id "
            "RETURN x.fact_uuid AS f",
            {"uuid": uuid, "group_id": group_id},
        )
        fact_uuid = rows[0]["f"] if rows else uuid
        rows = await self._read(
            group_id,
            # Anonymous endpoints: FalkorDB only uses the edge index in this shape.
            "MATCH ()-[e:RELATES_TO {fact_uuid: $fact_uuid}]->() "
            "WITH e, startNode(e) AS s, endNode(e) AS o WHERE e.group_id = $group_id"
            + self._FACT_RETURN
            + " ORDER BY e.valid_at, e.created_at, e.uuid",
            {"fact_uuid": fact_uuid, "group_id": group_id},
        )
        return [self._fact(r) for r in rows]

    async def audit_log(self, group_id: str, limit: int) -> list[AuditEvent]:
        rows = await self._read(
            group_id,
            "MATCH (a:AuditEvent) WHERE a.group_id = $group_id "
            "RETURN properties(a) AS a ORDER BY a.created_at DESC LIMIT $max_rows",
            {"group_id": group_id, "max_rows": limit},
        )
        return [AuditEvent.model_validate(self._decode(r["a"])) for r in rows]

    async def closures(self, group_id: str, limit: int) -> list[Fact]:
        match, params = self._fact_match(None, None, None)
        cypher = (
            match
            + " AND e.invalidated_by IS NOT NULL"
            + self._FACT_RETURN
            + " ORDER BY e.created_at DESC, e.uuid LIMIT $max_rows"
        )
        params.update(group_id=group_id, max_rows=limit)
        return [self._fact(r) for r in await self._read(group_id, cypher, params)]

    def _fact_match(
        self, subject_key: str | None, predicate: str | None, object_key: str | None
    ) -> tuple[str, dict[str, Any]]:
        """MATCH ... WHERE prefix; anchored on the subject when given, so its index is used."""
        params: dict[str, Any] = {}
        subject = "(s:Entity)"
        if subject_key is not None:
            subject = "(s:Entity {name_key: $subject_key})"
            params["subject_key"] = subject_key
        where = ["s.group_id = $group_id", "e.group_id = $group_id"]
        if predicate is not None:
            where.append("e.name = $predicate")
            params["predicate"] = predicate
        if object_key is not None:
            where.append("o.name_key = $object_key")
            params["object_key"] = object_key
        query = f"MATCH {subject}-[e:RELATES_TO]->(o:Entity) WHERE " + " AND ".join(where)
        return query, params

    _FACT_RETURN = (
        " RETURN properties(e) AS e, s.uuid AS source, o.uuid AS target,"
        " s.name AS subject, o.name AS object"
    )

    async def facts(self, query: FactQuery) -> list[Fact]:
        match, params = self._fact_match(query.subject_key, query.predicate, query.object_key)
        clauses = [
            f"{unindexed('e.valid_at')} <= $valid_at",
            "(e.invalid_at IS NULL OR e.invalid_at > $valid_at)",
            f"{unindexed('e.created_at')} <= $known_at",
            "(e.expired_at IS NULL OR e.expired_at > $known_at)",
        ]
        if not query.include_contested:
            clauses.append("coalesce(e.status, 'active') = 'active'")
        cypher = (
            match
            + " AND "
            + " AND ".join(clauses)
            + self._FACT_RETURN
            + " ORDER BY subject, e.name, e.valid_at, e.uuid LIMIT $max_rows"
        )
        params.update(
            group_id=query.group_id,
            valid_at=self.dialect.encode_time(query.valid_at),
            known_at=self.dialect.encode_time(query.known_at),
            max_rows=query.limit,
        )
        return [self._fact(r) for r in await self._read(query.group_id, cypher, params)]

    async def history(
        self,
        group_id: str,
        subject_key: str | None,
        predicate: str | None,
        object_key: str | None,
        limit: int,
    ) -> list[Fact]:
        match, params = self._fact_match(subject_key, predicate, object_key)
        cypher = (
            match
            + self._FACT_RETURN
            + (" ORDER BY subject, e.name, e.valid_at, e.created_at, e.uuid LIMIT $max_rows")
        )
        params.update(group_id=group_id, max_rows=limit)
        return [self._fact(r) for r in await self._read(group_id, cypher, params)]

    async def stats(self, group_id: str, now: datetime) -> StoreStats:
        t = self.dialect.encode_time(now)
        params = {"group_id": group_id, "now": t}
        count = {
            "episodes": "MATCH (n:Episodic) WHERE n.group_id = $group_id RETURN count(n) AS c",
            "entities": "MATCH (n:Entity) WHERE n.group_id = $group_id RETURN count(n) AS c",
            "edge_versions": "MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $group_id "
            "RETURN count(e) AS c",
            "current_facts": "MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $group_id "
            "AND e.expired_at IS NULL AND e.status = 'active' "
            f"AND {unindexed('e.valid_at')} <= $now "
            "AND (e.invalid_at IS NULL OR e.invalid_at > $now) RETURN count(e) AS c",
            "contested_facts": "MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $group_id "
            "AND e.expired_at IS NULL AND e.status = 'contested' RETURN count(e) AS c",
            "communities": "MATCH (c:Community) WHERE c.group_id = $group_id RETURN count(c) AS c",
        }
        values = {}
        for key, cypher in count.items():
            rows = await self._read(group_id, cypher, params)
            values[key] = int(rows[0]["c"]) if rows else 0
        return StoreStats(group_id=group_id, **values)

    async def communities(self, group_id: str, having: list[str] | None = None) -> list[Community]:
        match = (
            "MATCH (c:Community) WHERE c.group_id = $group_id " if having is None else
            # From the entities' index, not a scan of every community.
            "UNWIND $having AS u MATCH (c:Community)-[:HAS_MEMBER]->(:Entity {uuid: u}) "
            "WHERE c.group_id = $group_id WITH DISTINCT c "
        )  # fmt: skip
        rows = await self._read(
            group_id,
            f"{match}OPTIONAL MATCH (c)-[:HAS_MEMBER]->(n:Entity) "
            f"RETURN {COMMUNITY_COLUMNS} AS c, collect(n.uuid) AS members ORDER BY c.uuid",
            {"group_id": group_id, "having": having or []},
        )
        return [
            Community(node=CommunityNode.model_validate(self._decode(dict(r["c"]))),
                      members=sorted(r["members"]))
            for r in rows
        ]  # fmt: skip

    async def ingest_metrics(self, group_id: str) -> IngestMetrics:
        sums = ", ".join(f"sum(coalesce(ep.{f}, 0)) AS {f}" for f in _SUMMED)
        rows = await self._read(
            group_id,
            "MATCH (ep:Episodic) WHERE ep.group_id = $group_id AND ep.status = 'ingested' "
            "RETURN count(ep) AS episodes, "
            "sum(CASE WHEN ep.facts_extracted IS NULL THEN 0 ELSE 1 END) AS llm_episodes, "
            "sum(CASE WHEN ep.facts_extracted = 0 THEN 1 ELSE 0 END) AS empty_extractions, "
            f"{sums}",
            {"group_id": group_id},
        )
        if not rows:
            return IngestMetrics()
        return IngestMetrics.model_validate({k: int(v or 0) for k, v in rows[0].items()})

    async def query_metrics(self, group_id: str) -> QueryMetrics:
        rows = await self._read(
            group_id,
            "MATCH (q:QueryStats) WHERE q.group_id = $group_id RETURN properties(q) AS p",
            {"group_id": group_id},
        )
        if not rows:
            return QueryMetrics()
        p = dict(rows[0]["p"])
        hits = {k[5:]: int(v) for k, v in p.items() if k.startswith("hits_")}
        return QueryMetrics.model_validate(
            {k: v for k, v in p.items() if k in QueryMetrics.model_fields} | {"branch_hits": hits}
        )

    def compile_query_metrics(self, group_id: str, m: QueryMetrics) -> Statement:
        counters = {k: getattr(m, k) for k in _QUERY_COUNTERS}
        counters |= {f"hits_{k}": v for k, v in m.branch_hits.items() if valid_branch_key(k)}
        sets = ", ".join(f"q.{k} = coalesce(q.{k}, 0) + $m.{k}" for k in sorted(counters))
        return Statement(
            f"MERGE (q:QueryStats {{group_id: $group_id}}) SET {sets}",
            {"group_id": group_id, "m": counters},
        )

    async def record_query_metrics(self, group_id: str, metrics: QueryMetrics) -> None:
        await self._write(group_id, [self.compile_query_metrics(group_id, metrics)])

    # -- export and import: pages ordered by uuid (keyset), every property and vector ----------

    async def dump_page(
        self, group_id: str, kind: str, after: str, limit: int
    ) -> list[dict[str, Any]]:
        if kind not in _DUMP:
            raise ValueError(f"unknown export kind {kind!r}")
        params = {"group_id": group_id, "after": after, "page_size": limit}
        rows = await self._read(group_id, _DUMP[kind], params)
        out = []
        seen: set[str] = set()
        for r in rows:
            key = str(r["uuid"] if kind in ("mentions", "members") else r["p"]["uuid"])
            if key in seen:
                continue
            seen.add(key)
            if kind in ("mentions", "members"):
                row = dict(r)
                if row.get("created_at") is not None:
                    row["created_at"] = self.dialect.decode_time(row["created_at"])
                out.append(row)
                continue
            props = dict(r["p"])
            row = self._decode(props)
            for key in VECTOR_FIELDS:
                if props.get(key) is not None:
                    row[key] = [float(x) for x in props[key]]
            if kind == "edges":
                row |= {"source_node_uuid": r["source"], "target_node_uuid": r["target"]}
            out.append(row)
        return out

    def compile_patch(self, group_id: str, kind: str, items: list[Any]) -> list[Statement]:
        """Overwrite kg's properties on stored items in place (others are left as they are);
        a None field removes the property. Vectors are rewritten in the backend's form."""
        if not items:
            return []
        g = group_id
        fields = {k for k in type(items[0]).model_fields if k not in VECTOR_FIELDS}
        rows = []
        for x in items:
            props = {k: None for k in fields - set(ENDPOINT_FIELDS)} | self._encode(
                x, drop=ENDPOINT_FIELDS
            )
            rows.append({"uuid": x.uuid, "props": props})
        pattern, var, prop = _PATCH[kind]
        return [
            Statement(
                f"UNWIND $patch AS r MATCH {pattern} WHERE {var}.group_id = $group_id "
                f"SET {var} += r.props",
                {"patch": rows, "group_id": g},
            ),
            *self._vectors(f"{kind}_patch_vectors", pattern, f"{var}.{prop}", g,
                           [(x.uuid, getattr(x, prop)) for x in items]),
        ]  # fmt: skip

    async def patch(self, group_id: str, kind: str, items: list[Any]) -> None:
        statements = self.compile_patch(group_id, kind, items)
        if statements:
            await self._write(group_id, statements)

    def compile_load(self, group_id: str, kind: str, items: list[Any]) -> list[Statement]:
        """Statements that recreate dumped items as they were (uuids, times, vectors)."""
        g = group_id
        if not items:
            return []
        if kind == "entities":
            return self._create_entities(items, g)
        if kind == "episodes":
            rows = [_with_grams(self._encode(ep), "content") for ep in items]
            return [
                Statement("UNWIND $load_episodes AS r CREATE (ep:Episodic) SET ep += r",
                          {"load_episodes": rows}),
                *self._vectors(
                    "episode_vectors", "(ep:Episodic {uuid: r.uuid})", "ep.content_embedding", g,
                    [(ep.uuid, ep.content_embedding) for ep in items],
                ),
            ]  # fmt: skip
        if kind == "edges":
            return self._create_edges(items, g)
        if kind == "mentions":
            rows = [{**m.model_dump(), "created_at": self.dialect.encode_time(m.created_at)}
                    for m in items]  # fmt: skip
            return [Statement(
                "UNWIND $load_mentions AS m MATCH (ep:Episodic {uuid: m.episode}), "
                "(n:Entity {uuid: m.entity}) WHERE ep.group_id = $group_id "
                "AND n.group_id = $group_id CREATE (ep)-[:MENTIONS {uuid: m.uuid, "
                "group_id: $group_id, created_at: m.created_at}]->(n)",
                {"load_mentions": rows, "group_id": g},
            )]  # fmt: skip
        if kind == "communities":
            return self.compile_communities(CommunityPlan(group_id=g, create=items))
        if kind == "members":
            return self.compile_communities(CommunityPlan(group_id=g, members=items))
        if kind == "audit":
            return [Statement("UNWIND $load_audit AS r CREATE (a:AuditEvent) SET a += r",
                              {"load_audit": [self._encode(a) for a in items]})]  # fmt: skip
        raise ValueError(f"unknown import kind {kind!r}")

    async def load(self, group_id: str, kind: str, items: list[Any]) -> None:
        statements = self.compile_load(group_id, kind, items)
        if statements:
            await self._write(group_id, statements)

    def compile_communities(self, plan: CommunityPlan) -> list[Statement]:
        g = plan.group_id
        out: list[Statement] = []
        if plan.delete:
            out.append(Statement(
                "UNWIND $delete_communities AS u MATCH (c:Community {uuid: u}) "
                "WHERE c.group_id = $group_id DETACH DELETE c",
                {"delete_communities": plan.delete, "group_id": g},
            ))  # fmt: skip
        if plan.create:
            rows = [_with_grams(self._encode(c), "name", "summary") for c in plan.create]
            out.append(Statement("UNWIND $communities AS r CREATE (c:Community) SET c += r",
                                 {"communities": rows}))  # fmt: skip
            out += self._vectors(
                "community_vectors", "(c:Community {uuid: r.uuid})", "c.name_embedding", g,
                [(c.uuid, c.name_embedding) for c in plan.create],
            )  # fmt: skip
        if plan.members:
            out.append(Statement(
                "UNWIND $members AS m MATCH (c:Community {uuid: m.community_uuid}), "
                "(n:Entity {uuid: m.entity_uuid}) "
                "WHERE c.group_id = $group_id AND n.group_id = $group_id "
                "MERGE (c)-[r:HAS_MEMBER]->(n) ON CREATE SET r.uuid = m.community_uuid + ':' "
                "+ m.entity_uuid, r.group_id = $group_id, r.created_at = c.created_at",
                {"members": [m.model_dump() for m in plan.members], "group_id": g},
            ))  # fmt: skip
        if plan.mark_stale:
            out.append(Statement(
                "UNWIND $stale AS u MATCH (c:Community {uuid: u}) WHERE c.group_id = $group_id "
                "SET c.stale = true",
                {"stale": plan.mark_stale, "group_id": g},
            ))  # fmt: skip
        return out

    async def write_communities(self, plan: CommunityPlan) -> None:
        statements = self.compile_communities(plan)
        if statements:
            await self._write(plan.group_id, statements)

    # -- writes ---------------------------------------------------------------------------

    def compile_plan(self, plan: WritePlan) -> list[Statement]:
        g = plan.group_id
        now = self.dialect.encode_time(plan.episode.created_at)
        out = []
        if plan.replaces_failed:
            out.append(Statement(
                "MATCH (ep:Episodic {uuid: $failed}) WHERE ep.group_id = $group_id "
                "AND ep.status = 'failed' DETACH DELETE ep",
                {"failed": plan.replaces_failed, "group_id": g},
            ))  # fmt: skip
        out.append(
            Statement("CREATE (ep:Episodic) SET ep += $episode",
                      {"episode": _with_grams(self._encode(plan.episode), "content")})
        )  # fmt: skip
        out += self._vectors(
            "episode_vectors", "(ep:Episodic {uuid: r.uuid})", "ep.content_embedding", g,
            [(plan.episode.uuid, plan.episode.content_embedding)],
        )  # fmt: skip
        out += self._create_entities(plan.new_entities, g)
        if plan.mentions:
            out.append(
                Statement(
                    "MATCH (ep:Episodic {uuid: $mention_episode}) "
                    "UNWIND $mentions AS m MATCH (n:Entity {uuid: m.entity}) "
                    "WHERE n.group_id = $group_id "
                    "CREATE (ep)-[:MENTIONS {uuid: m.uuid, group_id: $group_id, "
                    "created_at: $now}]->(n)",
                    {
                        "mention_episode": plan.episode.uuid,
                        "mentions": [
                            {"entity": u, "uuid": f"{plan.episode.uuid}:{u}"} for u in plan.mentions
                        ],
                        "group_id": g,
                        "now": now,
                    },
                )
            )
        if plan.retirements:
            out.append(
                Statement(
                    "UNWIND $retirements AS r MATCH ()-[e:RELATES_TO {uuid: r.uuid}]->() "
                    "WHERE e.group_id = $group_id AND e.expired_at IS NULL "
                    "SET e.expired_at = r.expired_at",
                    {"retirements": [self._encode(r) for r in plan.retirements], "group_id": g},
                )
            )
        if plan.reinforcements:
            out.append(
                Statement(
                    "UNWIND $reinforcements AS r MATCH ()-[e:RELATES_TO {uuid: r.uuid}]->() "
                    "WHERE e.group_id = $group_id SET e.episodes = e.episodes + [r.episode_uuid], "
                    "e.episode_valid_at = coalesce(e.episode_valid_at, []) + [r.valid_at]",
                    {
                        "reinforcements": [self._encode(r) for r in plan.reinforcements],
                        "group_id": g,
                    },
                )
            )
        return out + self._create_edges(plan.new_edges, g)

    def _create_entities(self, entities: list[EntityNode], g: str) -> list[Statement]:
        """One CREATE per label set (labels cannot be parameters), then the vectors."""
        by_labels: dict[str, list[dict[str, Any]]] = {}
        for ent in entities:
            by_labels.setdefault(_label_suffix(ent.labels), []).append(
                _with_grams(self._encode(ent), "name", "summary")
            )
        out = [
            Statement(f"UNWIND $entities_{i} AS r CREATE (n:Entity{suffix}) SET n += r",
                      {f"entities_{i}": rows})
            for i, (suffix, rows) in enumerate(sorted(by_labels.items()))
        ]  # fmt: skip
        return out + self._vectors(
            "entity_vectors", "(n:Entity {uuid: r.uuid})", "n.name_embedding", g,
            [(e.uuid, e.name_embedding) for e in entities],
        )  # fmt: skip

    def _create_edges(self, edges: list[FactEdge], g: str) -> list[Statement]:
        if not edges:
            return []
        rows = [
            {
                "source": e.source_node_uuid,
                "target": e.target_node_uuid,
                "props": _with_grams(self._encode(e, drop=ENDPOINT_FIELDS), "fact"),
            }
            for e in edges
        ]
        return [
            Statement(
                "UNWIND $edges AS r "
                "MATCH (s:Entity {uuid: r.source}), (o:Entity {uuid: r.target}) "
                "WHERE s.group_id = $group_id AND o.group_id = $group_id "
                "CREATE (s)-[e:RELATES_TO]->(o) SET e += r.props",
                {"edges": rows, "group_id": g},
            ),
            *self._vectors(
                "edge_vectors", "()-[e:RELATES_TO {uuid: r.uuid}]->()", "e.fact_embedding", g,
                [(e.uuid, e.fact_embedding) for e in edges],
            ),
        ]  # fmt: skip

    def compile_rewrite(self, plan: RewritePlan) -> list[Statement]:
        g = plan.group_id
        out: list[Statement] = []

        def add(query: str, **params: Any) -> None:
            out.append(Statement(query, {**params, "group_id": g}))

        if plan.delete_edges:
            add(
                "UNWIND $delete_edges AS u MATCH ()-[e:RELATES_TO {uuid: u}]->() "
                "WHERE e.group_id = $group_id DELETE e",
                delete_edges=plan.delete_edges,
            )
        out += self._create_edges(plan.new_edges, g)
        if plan.drop_mentions_from:
            add(
                "UNWIND $drop_mentions AS u MATCH (ep:Episodic {uuid: u})-[m:MENTIONS]->() "
                "WHERE ep.group_id = $group_id DELETE m",
                drop_mentions=plan.drop_mentions_from,
            )
        if plan.delete_episodes:
            add(
                "UNWIND $delete_episodes AS u MATCH (ep:Episodic {uuid: u}) "
                "WHERE ep.group_id = $group_id DETACH DELETE ep",
                delete_episodes=plan.delete_episodes,
            )
        out += self.compile_communities(CommunityPlan(group_id=g, delete=plan.delete_communities))
        if plan.scrub_summaries:
            add(
                "UNWIND $scrub AS w MATCH (n:Entity) WHERE n.group_id = $group_id "
                "AND toLower(coalesce(n.summary, '')) CONTAINS toLower(w) "
                "SET n.summary = '', n.text_grams = null",
                scrub=plan.scrub_summaries,
            )
        if plan.delete_entities:
            add(
                "UNWIND $delete_entities AS u MATCH (n:Entity {uuid: u}) "
                "WHERE n.group_id = $group_id DETACH DELETE n",
                delete_entities=plan.delete_entities,
            )
        if plan.orphan_candidates:
            add(
                "UNWIND $orphans AS u MATCH (n:Entity {uuid: u}) WHERE n.group_id = $group_id "
                "OPTIONAL MATCH (n)-[r:RELATES_TO|MENTIONS]-() WITH n, count(r) AS degree "
                "WHERE degree = 0 DETACH DELETE n",  # a community membership keeps nothing alive
                orphans=plan.orphan_candidates,
            )
        if plan.rolled_back:
            if plan.audit is None:  # its time is the rollback's transaction time
                raise ValueError("a rewrite that rolls episodes back needs its audit event")
            add(
                "UNWIND $rolled_back AS u MATCH (ep:Episodic {uuid: u}) "
                "WHERE ep.group_id = $group_id "
                "SET ep.status = 'rolled_back', ep.rolled_back_at = $rolled_back_at",
                rolled_back=plan.rolled_back,
                rolled_back_at=self.dialect.encode_time(plan.audit.created_at),
            )
        if plan.audit is not None:
            add("CREATE (a:AuditEvent) SET a += $audit", audit=self._encode(plan.audit))
        return out  # fmt: skip

    async def rewrite(self, plan: RewritePlan) -> None:
        statements = self.compile_rewrite(plan)
        if statements:
            await self._write(plan.group_id, statements)

    def _vectors(
        self,
        param: str,
        pattern: str,
        prop: str,
        group_id: str,
        items: list[tuple[str, list[float] | None]],
    ) -> list[Statement]:
        """Embeddings go in a statement of their own: each backend stores vectors its own way."""
        rows = [{"uuid": uuid, "v": v} for uuid, v in items if v]
        if not rows:
            return []
        var = prop.split(".")[0]
        return [
            Statement(
                f"UNWIND ${param} AS r MATCH {pattern} WHERE {var}.group_id = $group_id "
                f"SET {prop} = {self.dialect.vector('r.v')}",
                {param: rows, "group_id": group_id},
            )
        ]  # fmt: skip

    async def apply(self, plan: WritePlan) -> None:
        await self._write(plan.group_id, self.compile_plan(plan))
