"""Write plans compiled to Cypher statements, each plan run by the backend as one atomic unit.

Embeddings go in statements of their own (`_vectors`): each backend stores vectors its own way.
"""

from __future__ import annotations

import abc
from datetime import datetime
from typing import Any

from kg.schemas.graph import EntityNode, EpisodicNode, FactEdge
from kg.schemas.labels import ENTITY_LABEL, check_not_reserved
from kg.schemas.metrics import (
    ApiMetrics,
    CallKind,
    CallStats,
    QueryMetrics,
    valid_branch_key,
    valid_call_name,
)
from kg.schemas.plan import CommunityPlan, GroupVersion, RewritePlan, WritePlan
from kg.schemas.store import PlanningNames, PlanningReads
from kg.schemas.validation import TYPE_NAME_RE
from kg.store.cypher.base import ENDPOINT_FIELDS, CypherBase, Fence, with_grams
from kg.store.cypher.dialect import Guard, Statement
from kg.store.cypher.queue import QUEUE_DONE, lease_guard

_QUERY_COUNTERS = (
    "queries",
    "zero_result_queries",
    "branch_errors",
    "latency_ms_total",
    "contexts",
    "context_tokens",
)


def label_suffix(labels: list[str]) -> str:
    """An entity's extra labels as Cypher: every entity is :Entity already, and no entity
    may carry another of kg's own labels (the last guard, whatever the caller checked)."""
    extra = sorted(set(labels) - {ENTITY_LABEL})
    for label in extra:
        if not TYPE_NAME_RE.fullmatch(label):
            raise ValueError(f"refusing to use {label!r} as a Cypher label")
        check_not_reserved(label)
    return "".join(f":{label}" for label in extra)


class CypherWrites(CypherBase):
    async def _write(
        self,
        group_id: str,
        statements: list[Statement],
        base: GroupVersion | None,
        tx: datetime | None = None,
        guard: Guard | None = None,
        queue: bool = False,
        **hold: Any,
    ) -> GroupVersion:
        """Every write of a group goes through here: one atomic unit that checks the version
        the plan was made at (if any) and makes a new one current; with a `guard` (a queued
        episode's lease), that unit checks it too; with `queue`, the unit is serialised with
        the group's queue transitions (see `Fence.queue`)."""
        encoded = self.dialect.encode_time(tx) if tx is not None else None
        fence = Fence(base, tx=encoded, queue=queue, **hold)
        version = await self.execute(group_id, statements, fence, guard)
        assert version is not None
        return version

    async def set_hold(
        self, group_id: str, base: GroupVersion | None, hold: str | None
    ) -> GroupVersion:
        """Mark (or, with None, unmark) the group as being written in several steps."""
        return await self._write(group_id, [], base, set_hold=True, hold=hold)

    def compile_plan(self, plan: WritePlan) -> list[Statement]:
        g = plan.group_id
        now = self.dialect.encode_time(plan.episode.created_at)
        out = []
        if plan.replaces_failed:
            out.append(
                Statement(
                    "MATCH (ep:Episodic {uuid: $failed}) WHERE ep.group_id = $group_id "
                    "AND ep.status = 'failed' DETACH DELETE ep",
                    {"failed": plan.replaces_failed, "group_id": g},
                )
            )
        episode = with_grams(self._encode(plan.episode), "search_key")
        if plan.lease_owner is None:
            out.append(Statement("CREATE (ep:Episodic) SET ep += $episode", {"episode": episode}))
        else:  # a queued episode, completed in place (its lease is the write's guard)
            # Its key changed (now with its facts). FalkorDB 4.16 silently keeps a vector
            # property that is overwritten by another vector; cleared first, it takes the new
            # one (written by `_episode_vectors`, a statement of its own).
            out.append(
                Statement(
                    "MATCH (ep:Episodic {uuid: $episode.uuid}) WHERE ep.group_id = $group_id "
                    f"SET ep += $episode, {QUEUE_DONE}, ep.key_embedding = null",
                    {"episode": episode, "group_id": g},
                )
            )
        out += self._episode_vectors([plan.episode], g)
        out += self._create_entities(plan.new_entities, g)
        if plan.mentions:
            out.append(
                Statement(
                    "MATCH (ep:Episodic {uuid: $mention_episode}) WHERE ep.group_id = $group_id "
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

    def _episode_vectors(self, episodes: list[EpisodicNode], g: str) -> list[Statement]:
        """An episode's two embeddings: its content's, and its search key's."""
        return [
            *self._vectors(
                "episode_vectors",
                "(ep:Episodic {uuid: r.uuid})",
                "ep.content_embedding",
                g,
                [(ep.uuid, ep.content_embedding) for ep in episodes],
            ),
            *self._vectors(
                "episode_key_vectors",
                "(ep:Episodic {uuid: r.uuid})",
                "ep.key_embedding",
                g,
                [(ep.uuid, ep.key_embedding) for ep in episodes],
            ),
        ]

    def _rekey(self, plan: RewritePlan) -> list[Statement]:
        """Rebuilt search keys: text and grams replaced, the old embedding dropped (FalkorDB
        4.16 ignores a vector overwritten in place), the new one (if any) written in a
        statement of its own. Deleted episodes match nothing."""
        if not plan.rekey:
            return []
        g = plan.group_id
        rows = [
            with_grams({"uuid": k.uuid, "search_key": k.search_key}, "search_key")
            for k in plan.rekey
        ]
        return [
            Statement(
                "UNWIND $rekey AS r MATCH (ep:Episodic {uuid: r.uuid}) "
                "WHERE ep.group_id = $group_id SET ep.search_key = r.search_key, "
                "ep.text_grams = r.text_grams, ep.key_embedding = null",
                {"rekey": rows, "group_id": g},
            ),
            *self._vectors(
                "rekey_vectors",
                "(ep:Episodic {uuid: r.uuid})",
                "ep.key_embedding",
                g,
                [(k.uuid, k.key_embedding) for k in plan.rekey],
            ),
        ]

    def _create_entities(self, entities: list[EntityNode], g: str) -> list[Statement]:
        """One CREATE per label set (labels cannot be parameters), then the vectors."""
        by_labels: dict[str, list[dict[str, Any]]] = {}
        for ent in entities:
            by_labels.setdefault(label_suffix(ent.labels), []).append(
                with_grams(self._encode(ent), "name", "summary")
            )
        out = [
            Statement(
                f"UNWIND $entities_{i} AS r CREATE (n:Entity{suffix}) SET n += r",
                {f"entities_{i}": rows},
            )
            for i, (suffix, rows) in enumerate(sorted(by_labels.items()))
        ]
        return out + self._vectors(
            "entity_vectors",
            "(n:Entity {uuid: r.uuid})",
            "n.name_embedding",
            g,
            [(e.uuid, e.name_embedding) for e in entities],
        )

    def _create_edges(self, edges: list[FactEdge], g: str) -> list[Statement]:
        if not edges:
            return []
        rows = [
            {
                "source": e.source_node_uuid,
                "target": e.target_node_uuid,
                "props": with_grams(self._encode(e, drop=ENDPOINT_FIELDS), "fact"),
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
                "edge_vectors",
                "()-[e:RELATES_TO {uuid: r.uuid}]->()",
                "e.fact_embedding",
                g,
                [(e.uuid, e.fact_embedding) for e in edges],
            ),
        ]

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
        if plan.new_episodes:  # an erasure's redacted copies (their keys embedded by _rekey)
            add(
                "UNWIND $new_episodes AS r CREATE (ep:Episodic) SET ep += r",
                new_episodes=[
                    with_grams(self._encode(ep), "search_key") for ep in plan.new_episodes
                ],
            )
        mentions = [{"episode": u, "entities": e} for u, e in sorted(plan.new_mentions.items())]
        if mentions:
            add(
                "UNWIND $new_mentions AS m MATCH (ep:Episodic {uuid: m.episode}) "
                "WHERE ep.group_id = $group_id UNWIND m.entities AS u "
                "MATCH (n:Entity {uuid: u}) WHERE n.group_id = $group_id "
                "CREATE (ep)-[:MENTIONS {uuid: m.episode + ':' + u, group_id: $group_id, "
                "created_at: ep.created_at}]->(n)",
                new_mentions=mentions,
            )
        out += self.compile_communities(CommunityPlan(group_id=g, delete=plan.delete_communities))
        out += self._compile_closing(plan)
        out += self._rekey(plan)
        if plan.audit is not None:
            add("CREATE (a:AuditEvent) SET a += $audit", audit=self._encode(plan.audit))
        return out

    def _compile_closing(self, plan: RewritePlan) -> list[Statement]:
        """A rewrite's last steps before the search keys: summaries scrubbed, entities and
        orphans deleted, rolled-back episodes marked."""
        g = plan.group_id
        out: list[Statement] = []

        def add(query: str, **params: Any) -> None:
            out.append(Statement(query, {**params, "group_id": g}))

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
                "SET ep.status = 'rolled_back', ep.rolled_back_at = $rolled_back_at, "
                # A queued one is cancelled: no worker claims it, and one holding it loses
                # its lease, so its write is refused (`lease_guard`).
                "ep.lease_owner = null, ep.lease_expires_at = null, ep.next_attempt_at = null, "
                "ep.staged = null",
                rolled_back=plan.rolled_back,
                rolled_back_at=self.dialect.encode_time(plan.audit.created_at),
            )
        return out

    async def rewrite(self, plan: RewritePlan) -> GroupVersion:
        """Serialised with the queue's transitions too: a rewrite may cancel or delete
        queued episodes, and a claim must not read one as ready meanwhile."""
        tx = plan.audit.created_at if plan.audit is not None else None
        return await self._write(
            plan.group_id, self.compile_rewrite(plan), plan.base, tx, queue=True
        )

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
        ]

    async def apply(self, plan: WritePlan) -> GroupVersion:
        guard = None
        if plan.lease_owner is not None:
            guard = lease_guard(plan.episode.uuid, plan.lease_owner)
        return await self._write(
            plan.group_id, self.compile_plan(plan), plan.base, plan.episode.created_at, guard
        )

    def compile_many(self, plans: list[WritePlan]) -> list[Statement]:
        """Plans made in order, each against what the ones before it write, as one statement
        per kind of change over them all (the same query text for any batch): episodes,
        entities, mentions, new versions, then the retirements and the reinforcements, which
        may name a version created earlier in the batch. A version's reinforcements are one
        row, in the plans' order."""
        if any(p.lease_owner is not None for p in plans):
            raise ValueError("a queued episode's plan is written alone, under its lease")
        if len(plans) == 1:
            return self.compile_plan(plans[0])
        g = plans[0].group_id
        out = []
        failed = [p.replaces_failed for p in plans if p.replaces_failed]
        if failed:
            out.append(
                Statement(
                    "UNWIND $failed_episodes AS u MATCH (ep:Episodic {uuid: u}) "
                    "WHERE ep.group_id = $group_id AND ep.status = 'failed' DETACH DELETE ep",
                    {"failed_episodes": failed, "group_id": g},
                )
            )
        episodes = [p.episode for p in plans]
        out.append(
            Statement(
                "UNWIND $episodes AS r CREATE (ep:Episodic) SET ep += r",
                {"episodes": [with_grams(self._encode(ep), "search_key") for ep in episodes]},
            )
        )
        out += self._episode_vectors(episodes, g)
        out += self._create_entities([n for p in plans for n in p.new_entities], g)
        # One row per episode, as `compile_plan` writes one episode's: its node is found once,
        # and a mention's uuid and time (the episode's) are made where they are written.
        mentions = [
            {"episode": p.episode.uuid, "entities": p.mentions} for p in plans if p.mentions
        ]
        if mentions:
            out.append(
                Statement(
                    "UNWIND $mentions AS m MATCH (ep:Episodic {uuid: m.episode}) "
                    "WHERE ep.group_id = $group_id "
                    "UNWIND m.entities AS u MATCH (n:Entity {uuid: u}) "
                    "WHERE n.group_id = $group_id "
                    "CREATE (ep)-[:MENTIONS {uuid: m.episode + ':' + u, group_id: $group_id, "
                    "created_at: ep.created_at}]->(n)",
                    {"mentions": mentions, "group_id": g},
                )
            )
        out += self._create_edges([e for p in plans for e in p.new_edges], g)
        retirements = [self._encode(r) for p in plans for r in p.retirements]
        if retirements:
            out.append(
                Statement(
                    "UNWIND $retirements AS r MATCH ()-[e:RELATES_TO {uuid: r.uuid}]->() "
                    "WHERE e.group_id = $group_id AND e.expired_at IS NULL "
                    "SET e.expired_at = r.expired_at",
                    {"retirements": retirements, "group_id": g},
                )
            )
        support: dict[str, dict[str, Any]] = {}
        for p in plans:
            for f in p.reinforcements:
                row = support.setdefault(f.uuid, {"uuid": f.uuid, "episodes": [], "valid_at": []})
                row["episodes"].append(f.episode_uuid)
                row["valid_at"].append(self.dialect.encode_time(f.valid_at))
        if support:
            out.append(
                Statement(
                    "UNWIND $reinforcements AS r MATCH ()-[e:RELATES_TO {uuid: r.uuid}]->() "
                    "WHERE e.group_id = $group_id SET e.episodes = e.episodes + r.episodes, "
                    "e.episode_valid_at = coalesce(e.episode_valid_at, []) + r.valid_at",
                    {"reinforcements": list(support.values()), "group_id": g},
                )
            )
        return out

    async def apply_many(
        self, plans: list[WritePlan], names: PlanningNames | None
    ) -> tuple[GroupVersion, PlanningReads | None]:
        """Here the write, then the read (a round trip each); FalkorDB does both in one."""
        last = plans[-1].episode.created_at  # the clock's latest: the write's time
        version = await self._write(
            plans[0].group_id, self.compile_many(plans), plans[0].base, last
        )
        if names is None:
            return version, None
        return version, await self.planning_reads(plans[0].group_id, names)

    @abc.abstractmethod
    async def planning_reads(self, group_id: str, names: PlanningNames) -> PlanningReads: ...

    def compile_communities(self, plan: CommunityPlan) -> list[Statement]:
        g = plan.group_id
        out: list[Statement] = []
        if plan.delete:
            out.append(
                Statement(
                    "UNWIND $delete_communities AS u MATCH (c:Community {uuid: u}) "
                    "WHERE c.group_id = $group_id DETACH DELETE c",
                    {"delete_communities": plan.delete, "group_id": g},
                )
            )
        if plan.create:
            rows = [with_grams(self._encode(c), "name", "summary") for c in plan.create]
            out.append(
                Statement(
                    "UNWIND $communities AS r CREATE (c:Community) SET c += r",
                    {"communities": rows},
                )
            )
            out += self._vectors(
                "community_vectors",
                "(c:Community {uuid: r.uuid})",
                "c.name_embedding",
                g,
                [(c.uuid, c.name_embedding) for c in plan.create],
            )
        if plan.members:
            out.append(
                Statement(
                    "UNWIND $members AS m MATCH (c:Community {uuid: m.community_uuid}), "
                    "(n:Entity {uuid: m.entity_uuid}) "
                    "WHERE c.group_id = $group_id AND n.group_id = $group_id "
                    "MERGE (c)-[r:HAS_MEMBER]->(n) ON CREATE SET r.uuid = m.community_uuid + ':' "
                    "+ m.entity_uuid, r.group_id = $group_id, r.created_at = c.created_at",
                    {"members": [m.model_dump() for m in plan.members], "group_id": g},
                )
            )
        if plan.mark_stale:
            out.append(
                Statement(
                    "UNWIND $stale AS u MATCH (c:Community {uuid: u}) WHERE c.group_id = $group_id "
                    "SET c.stale = true",
                    {"stale": plan.mark_stale, "group_id": g},
                )
            )
        return out

    async def write_communities(self, plan: CommunityPlan) -> GroupVersion:
        return await self._write(plan.group_id, self.compile_communities(plan), plan.base)

    def compile_query_metrics(self, group_id: str, m: QueryMetrics) -> Statement:
        counters = {k: getattr(m, k) for k in _QUERY_COUNTERS}
        counters |= {f"hits_{k}": v for k, v in m.branch_hits.items() if valid_branch_key(k)}
        sets = ", ".join(f"q.{k} = coalesce(q.{k}, 0) + $m.{k}" for k in sorted(counters))
        return Statement(
            f"MERGE (q:QueryStats {{group_id: $group_id}}) SET {sets}",
            {"group_id": group_id, "m": counters},
        )

    async def record_query_metrics(self, group_id: str, metrics: QueryMetrics) -> None:
        # Counters only add up: no plan reads them, so this write moves no version.
        await self.execute(group_id, [self.compile_query_metrics(group_id, metrics)])

    def compile_api_metrics(self, group_id: str, m: ApiMetrics) -> Statement:
        """One `ApiStats` node per (group, kind, name), its counters added to."""
        kinds: tuple[tuple[CallKind, dict[str, CallStats]], ...] = (
            ("route", m.routes),
            ("tool", m.tools),
        )
        rows = [
            {
                "kind": kind,
                "name": name,
                "calls": c.calls,
                "errors": c.errors,
                "latency_ms_total": float(c.latency_ms_total),
            }
            for kind, calls in kinds
            for name, c in sorted(calls.items())
            if valid_call_name(kind, name)
        ]
        return Statement(
            "UNWIND $rows AS r "
            "MERGE (a:ApiStats {group_id: $group_id, kind: r.kind, name: r.name}) "
            "SET a.calls = coalesce(a.calls, 0) + r.calls, "
            "a.errors = coalesce(a.errors, 0) + r.errors, "
            "a.latency_ms_total = coalesce(a.latency_ms_total, 0.0) + r.latency_ms_total",
            {"group_id": group_id, "rows": rows},
        )

    async def record_api_metrics(self, group_id: str, metrics: ApiMetrics) -> None:
        # Counters only add up, like the query metrics: this write moves no version.
        if not metrics.empty:
            await self.execute(group_id, [self.compile_api_metrics(group_id, metrics)])
