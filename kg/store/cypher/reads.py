"""The reads both backends share: episodes, timelines, facts as of a time, history, stats,
communities and metrics."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from kg.schemas.graph import AuditEvent, CommunityNode, EntityNode, EpisodicNode, Fact, FactEdge
from kg.schemas.metrics import ApiMetrics, CallStats, Counters, IngestMetrics, QueryMetrics
from kg.schemas.store import (
    Community,
    EntitySummary,
    FactQuery,
    PageAfter,
    PlanningNames,
    PlanningReads,
    StoreStats,
    TimelineKey,
)
from kg.store.cypher.base import CypherBase
from kg.store.cypher.dialect import Statement, unindexed
from kg.store.cypher.search import COMMUNITY_COLUMNS

_SUMMED = tuple(Counters.model_fields)
FACT_RETURN = (
    " RETURN properties(e) AS e, s.uuid AS source, o.uuid AS target,"
    " s.name AS subject, o.name AS object"
)

# A session's searchable turns (kg.search_keys), in the group's order: reference time, then
# arrival (a queued episode arrived when it was queued).
_SESSION_TURNS = (
    "MATCH (ep:Episodic {session_id: $session}) WHERE ep.group_id = $group_id "
    "AND ep.status IN ['ingested', 'queued', 'processing'] AND ep.source <> 'facts'"
)
_TURN_ORDER = "ORDER BY ep.valid_at, coalesce(ep.queued_at, ep.created_at)"

# A structured episode's planning reads as one query (see `planning_reads`): one row per
# thing read, tagged by `kind`, so one round trip replaces four (or none, when it rides in
# the write before it: FalkorDB's `apply_many`; its parameters are named apart). A
# timeline's versions come from its subject's name (no edge is returned twice: one
# predicate is single- or multi-valued), the subject found by its (group, name key) index
# (`SUBJECT_HINT`: the dialect's hint, where it has them): Neo4j's planner otherwise could seek
# every edge of the group with the predicate instead, a read that grows with the group.
SUBJECT_HINT = "/*subject*/"
_PLANNING_READS = (
    "UNWIND $pr_hashes AS h MATCH (ep:Episodic {content_hash: h}) WHERE ep.group_id = $group_id "
    "RETURN 'episode' AS kind, properties(ep) AS p, null AS source, null AS target "
    "UNION ALL UNWIND $pr_keys AS k MATCH (n:Entity {name_key: k}) WHERE n.group_id = $group_id "
    "RETURN 'entity' AS kind, properties(n) AS p, null AS source, null AS target "
    "UNION ALL UNWIND $pr_timelines AS k "
    f"MATCH (s:Entity {{name_key: k.subject}})-[e:RELATES_TO]->(o:Entity){SUBJECT_HINT} "
    "WHERE s.group_id = $group_id AND e.group_id = $group_id AND e.name = k.predicate "
    "AND e.expired_at IS NULL "
    "AND (k.object IS NULL OR o.name_key = k.object) AND (e.invalid_at IS NULL OR "
    f"{unindexed('e.invalid_at')} > k.since OR {unindexed('e.valid_at')} > k.since) "
    "RETURN 'edge' AS kind, properties(e) AS p, s.uuid AS source, o.uuid AS target "
    "UNION ALL MATCH (c:Community) WHERE c.group_id = $group_id "
    "RETURN 'community' AS kind, null AS p, null AS source, null AS target LIMIT 1"
)
# Idempotency keys' episodes (asked only for keys given: a null key matching nothing would
# still scan the episodes).
_BY_KEY = (
    "UNWIND $pr_idempotency AS i MATCH (ep:Episodic {idempotency_key: i}) "
    "WHERE ep.group_id = $group_id "
    "RETURN 'episode' AS kind, properties(ep) AS p, null AS source, null AS target UNION ALL "
)


_ID_PREFIX = {
    "episode": "MATCH (ep:Episodic) WHERE ep.group_id = $group_id AND ep.uuid STARTS WITH $p "
    "RETURN ep.uuid AS id ORDER BY id LIMIT $max_rows",
    "fact": "MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $group_id "
    "AND (e.fact_uuid STARTS WITH $p OR e.uuid STARTS WITH $p) "
    "RETURN DISTINCT e.fact_uuid AS id ORDER BY id LIMIT $max_rows",
}


class CypherReads(CypherBase):
    async def ids_by_prefix(
        self, group_id: str, kind: Literal["episode", "fact"], prefix: str, limit: int
    ) -> list[str]:
        rows = await self._read(
            group_id, _ID_PREFIX[kind], {"group_id": group_id, "p": prefix, "max_rows": limit}
        )
        return [r["id"] for r in rows]

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

    def planning_read(self, group_id: str, names: PlanningNames) -> Statement:
        """The planning read as a statement (see `planning_reads`)."""
        params: dict[str, Any] = {
            "pr_hashes": list(names.content_hashes),
            "pr_keys": list(names.name_keys),
            "pr_timelines": [
                {
                    "subject": t.subject_key,
                    "predicate": t.predicate,
                    "object": t.object_key,
                    "since": self.dialect.encode_time(t.since),
                }
                for t in names.timelines
            ],
            "group_id": group_id,
        }
        hint = self.dialect.index_hint("s", "Entity", ("group_id", "name_key"))
        query = _PLANNING_READS.replace(SUBJECT_HINT, hint)
        if names.idempotency_keys:
            query, params["pr_idempotency"] = _BY_KEY + query, list(names.idempotency_keys)
        return Statement(query, params)

    def planning_rows(self, rows: list[dict[str, Any]]) -> PlanningReads:
        """A planning read's rows (`kind`, `p`, `source`, `target`) as what they say."""
        of: dict[str, list[dict[str, Any]]] = {"episode": [], "entity": [], "edge": []}
        for r in rows:
            of.setdefault(r["kind"], []).append(r)
        episodes = {e.uuid: e for e in self._episodes([{"ep": r["p"]} for r in of["episode"]])}
        entities = [EntityNode.model_validate(self._decode(r["p"])) for r in of["entity"]]
        return PlanningReads(
            episodes=list(episodes.values()),
            entities=sorted(entities, key=lambda n: (n.created_at, n.uuid)),
            edges=[self._edge(r["p"], r["source"], r["target"]) for r in of["edge"]],
            communities=bool(of.get("community")),
        )

    async def planning_reads(self, group_id: str, names: PlanningNames) -> PlanningReads:
        read = self.planning_read(group_id, names)
        return self.planning_rows(await self._read(group_id, read.query, read.params))

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

    async def episode_page(
        self,
        group_id: str,
        limit: int,
        after: PageAfter | None = None,
        *,
        quarantined: bool = False,
    ) -> list[EpisodicNode]:
        where = ["ep.group_id = $group_id"]
        params: dict[str, Any] = {"group_id": group_id, "max_rows": limit}
        if quarantined:
            where.append("ep.quarantine IS NOT NULL")
        if after is not None:
            where.append(
                f"({unindexed('ep.created_at')} < $after_at OR "
                "(ep.created_at = $after_at AND ep.uuid < $after_uuid))"
            )
            params.update(
                after_at=self.dialect.encode_time(after.created_at), after_uuid=after.uuid
            )
        rows = await self._read(
            group_id,
            # Ordered and cut before the properties are read: only the page is materialised.
            "MATCH (ep:Episodic) WHERE " + " AND ".join(where) + " "
            "WITH ep ORDER BY ep.created_at DESC, ep.uuid DESC LIMIT $max_rows "
            "RETURN properties(ep) AS ep",
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

    async def turn_before(self, group_id: str, episode: EpisodicNode) -> EpisodicNode | None:
        if episode.session_id is None:
            return None
        rows = await self._read(
            group_id,
            f"{_SESSION_TURNS} AND ep.uuid <> $uuid AND "
            f"({unindexed('ep.valid_at')} < $valid_at OR (ep.valid_at = $valid_at AND "
            f"{unindexed('coalesce(ep.queued_at, ep.created_at)')} < $arrived)) "
            "RETURN properties(ep) AS ep "
            "ORDER BY ep.valid_at DESC, coalesce(ep.queued_at, ep.created_at) DESC LIMIT 1",
            {
                "group_id": group_id,
                "session": episode.session_id,
                "uuid": episode.uuid,
                "valid_at": self.dialect.encode_time(episode.valid_at),
                "arrived": self.dialect.encode_time(episode.queued_at or episode.created_at),
            },
        )
        found = self._episodes(rows)
        return found[0] if found else None

    async def session_turns(self, group_id: str, session_id: str) -> list[EpisodicNode]:
        rows = await self._read(
            group_id,
            f"{_SESSION_TURNS} RETURN properties(ep) AS ep {_TURN_ORDER}",
            {"group_id": group_id, "session": session_id},
        )
        return self._episodes(rows)

    async def entities(self, group_id: str, contains: str, limit: int) -> list[EntitySummary]:
        rows = await self._read(
            group_id,
            "MATCH (n:Entity) WHERE n.group_id = $group_id AND n.name_key CONTAINS $contains "
            "OPTIONAL MATCH (n)-[e:RELATES_TO]->() WITH n, count(e) AS out "
            "OPTIONAL MATCH ()-[i:RELATES_TO]->(n) "
            "RETURN properties(n) AS n, n.name AS name, n.uuid AS id, out, count(i) AS inc "
            "ORDER BY out DESC, name, id LIMIT $max_rows",
            {"group_id": group_id, "contains": contains, "max_rows": limit},
        )
        return [
            EntitySummary(
                entity=EntityNode.model_validate(self._decode(r["n"])),
                as_subject=int(r["out"]),
                as_object=int(r["inc"]),
            )
            for r in rows
        ]

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
            + FACT_RETURN
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
            + FACT_RETURN
            + " ORDER BY e.created_at DESC, e.uuid LIMIT $max_rows"
        )
        params.update(group_id=group_id, max_rows=limit)
        return [self._fact(r) for r in await self._read(group_id, cypher, params)]

    async def contested(self, group_id: str, limit: int) -> list[Fact]:
        match, params = self._fact_match(None, None, None)
        cypher = (
            match
            + " AND e.expired_at IS NULL AND e.status = 'contested'"
            + FACT_RETURN
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
            + FACT_RETURN
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
            + FACT_RETURN
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
            "MATCH (c:Community) WHERE c.group_id = $group_id "
            if having is None
            # From the entities' index, not a scan of every community.
            else "UNWIND $having AS u MATCH (c:Community)-[:HAS_MEMBER]->(:Entity {uuid: u}) "
            "WHERE c.group_id = $group_id WITH DISTINCT c "
        )
        rows = await self._read(
            group_id,
            f"{match}OPTIONAL MATCH (c)-[:HAS_MEMBER]->(n:Entity) "
            f"RETURN {COMMUNITY_COLUMNS} AS c, collect(n.uuid) AS members ORDER BY c.uuid",
            {"group_id": group_id, "having": having or []},
        )
        return [
            Community(
                node=CommunityNode.model_validate(self._decode(dict(r["c"]))),
                members=sorted(r["members"]),
            )
            for r in rows
        ]

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

    async def api_metrics(self, group_id: str) -> ApiMetrics:
        rows = await self._read(
            group_id,
            "MATCH (a:ApiStats) WHERE a.group_id = $group_id RETURN a.kind AS kind, "
            "a.name AS name, a.calls AS calls, a.errors AS errors, "
            "a.latency_ms_total AS latency_ms_total",
            {"group_id": group_id},
        )
        out = ApiMetrics()
        for r in rows:
            calls = out.routes if r["kind"] == "route" else out.tools
            calls[str(r["name"])] = CallStats(
                calls=int(r["calls"] or 0),
                errors=int(r["errors"] or 0),
                latency_ms_total=float(r["latency_ms_total"] or 0.0),
            )
        return out
