"""The background queue, kept in the graph store itself: queued episodes are Episodic nodes.

An episode goes queued -> processing (claimed: a lease with an owner and an expiry) ->
ingested, or back to queued (a failed attempt, with a later `next_attempt_at`), or failed
(out of attempts). Each transition is one conditional update run atomically and serialised
with the group's other transitions (`_queue_write`: a single FalkorDB query; on Neo4j a
transaction that first takes the group's queue lock). The write that completes an episode
carries its lease as a guard, so a worker whose lease was taken over writes nothing.

Times are compared through `unindexed` (see kg.store.cypher.dialect).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kg.schemas.graph import EpisodicNode
from kg.schemas.metrics import QueueMetrics
from kg.store.cypher.base import CypherBase, with_grams
from kg.store.cypher.dialect import Guard, Statement, unindexed

# What completing a queued episode clears (the rest of the node is overwritten by the plan).
QUEUE_DONE = (
    "ep.lease_owner = null, ep.lease_expires_at = null, ep.next_attempt_at = null, "
    "ep.staged = null, ep.error = null"
)
LATENCY_SAMPLES = 1000  # the most recent queued episodes the latency percentiles cover

_LIVE_ELSEWHERE = (
    "MATCH (b:Episodic {status: 'processing'}) WHERE b.group_id = $group_id "
    f"AND b.lease_owner <> $owner AND {unindexed('b.lease_expires_at')} > $now"
)
_READY = (
    "(e.status = 'queued' AND (e.next_attempt_at IS NULL OR "
    f"{unindexed('e.next_attempt_at')} <= $now)) OR (e.status = 'processing' AND "
    f"{unindexed('e.lease_expires_at')} <= $now)"
)
_HELD = "e.group_id = $group_id AND e.status = 'processing' AND e.lease_owner = $owner"


def lease_guard(uuid: str, owner: str) -> Guard:
    """The guard of the write that completes a queued episode: its lease is still `owner`'s."""
    return Guard(
        match="MATCH (kg_guard:Episodic {uuid: $kg_lease_uuid}) "
        "WHERE kg_guard.group_id = $group_id AND kg_guard.status = 'processing' "
        "AND kg_guard.lease_owner = $kg_lease_owner",
        params={"kg_lease_uuid": uuid, "kg_lease_owner": owner},
        failure=f"episode {uuid}: its lease was taken over by another worker; nothing written",
    )


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..1); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q * len(ordered) + 0.5)))
    return ordered[rank - 1]


class CypherQueue(CypherBase):
    async def _q(self, group_id: str, query: str, **params: Any) -> list[dict[str, Any]]:
        return await self._queue_write(group_id, Statement(query, {"group_id": group_id, **params}))

    def _t(self, value: datetime | None) -> Any:
        return None if value is None else self.dialect.encode_time(value)

    async def enqueue(self, node: EpisodicNode) -> tuple[EpisodicNode, bool]:
        """Store a queued episode unless the group has it already (same content hash, or same
        idempotency key) and is not failed: (the stored episode, whether it is this one). A
        failed one with the same hash or key is replaced, as a waiting add_episode does."""
        g = node.group_id
        vector = ""
        params: dict[str, Any] = {
            "episode": with_grams(self._encode(node), "search_key"),
            "hash": node.content_hash,
            "key": node.idempotency_key,
        }
        if node.content_embedding:
            vector = f", ep.content_embedding = {self.dialect.vector('$vector')}"
            params["vector"] = node.content_embedding
        if node.key_embedding:
            vector += f", ep.key_embedding = {self.dialect.vector('$key_vector')}"
            params["key_vector"] = node.key_embedding
        rows = await self._q(
            g,
            # (One list at a time: FalkorDB 4.16 loses an aggregate's alias in an expression
            # that combines it with another in the same WITH.)
            "OPTIONAL MATCH (x:Episodic {content_hash: $hash}) WHERE x.group_id = $group_id "
            "WITH collect(x) AS by_hash "
            "OPTIONAL MATCH (y:Episodic {idempotency_key: $key}) WHERE y.group_id = $group_id "
            "WITH by_hash, collect(y) AS by_key WITH by_hash + by_key AS same "
            "WITH [e IN same WHERE e.status <> 'failed'] AS live, "
            "[e IN same WHERE e.status = 'failed'] AS failed WHERE size(live) = 0 "
            "FOREACH (f IN failed | DETACH DELETE f) "
            f"CREATE (ep:Episodic) SET ep += $episode{vector} RETURN ep.uuid AS uuid",
            **params,
        )
        if rows:
            return node, True
        existing = await self.episode_by_key(g, node.content_hash, node.idempotency_key)
        if existing is None:  # deleted between the two queries (an erasure): try once more
            return await self.enqueue(node)
        return existing, False

    async def episode_by_key(
        self, group_id: str, content_hash: str, key: str | None
    ) -> EpisodicNode | None:
        """The group's episode with this content hash or idempotency key; a failed one only
        when there is no other."""
        rows = await self._read(
            group_id,
            "MATCH (ep:Episodic {content_hash: $hash}) WHERE ep.group_id = $group_id "
            "RETURN properties(ep) AS ep "
            "UNION MATCH (ep:Episodic {idempotency_key: $key}) WHERE ep.group_id = $group_id "
            "RETURN properties(ep) AS ep",
            {"hash": content_hash, "key": key, "group_id": group_id},
        )
        found = sorted(self._episodes(rows), key=lambda e: (e.status == "failed", e.created_at))
        return found[0] if found else None

    async def debounce(self, group_id: str, session_id: str, until: datetime) -> int:
        """Hold the session's queued episodes until `until` (a new message restarts the wait)."""
        rows = await self._q(
            group_id,
            "MATCH (e:Episodic {session_id: $session}) WHERE e.group_id = $group_id "
            "AND e.status = 'queued' AND (e.next_attempt_at IS NULL OR "
            f"{unindexed('e.next_attempt_at')} < $until) "
            "SET e.next_attempt_at = $until RETURN count(e) AS n",
            session=session_id,
            until=self._t(until),
        )
        return int(rows[0]["n"]) if rows else 0

    async def ready(
        self, group_id: str, owner: str, now: datetime, limit: int
    ) -> tuple[list[EpisodicNode], bool]:
        """The next episodes a worker may claim, in the group's order (reference time, then
        arrival), and whether another worker holds a live lease in the group (then none)."""
        params = {"group_id": group_id, "owner": owner, "now": self._t(now)}
        busy = await self._read(group_id, f"{_LIVE_ELSEWHERE} RETURN count(b) AS n", params)
        if busy and int(busy[0]["n"]):
            return [], True
        rows = await self._read(
            group_id,
            "UNWIND ['queued', 'processing'] AS s MATCH (e:Episodic {status: s}) "
            f"WHERE e.group_id = $group_id AND ({_READY}) "
            "RETURN properties(e) AS ep ORDER BY e.valid_at, e.queued_at, e.uuid LIMIT $limit",
            {**params, "limit": limit},
        )
        return [EpisodicNode.model_validate(self._decode(r["ep"])) for r in rows], False

    async def claim(
        self, group_id: str, owner: str, uuids: list[str], now: datetime, until: datetime
    ) -> list[EpisodicNode]:
        """Take a lease on those of `uuids` still ready, atomically, unless another worker
        holds a live lease in the group: the group is one worker's at a time, so its
        episodes are written in order. Each claim counts an attempt."""
        if not uuids:
            return []
        rows = await self._q(
            group_id,
            f"OPTIONAL {_LIVE_ELSEWHERE} WITH count(b) AS busy WHERE busy = 0 "
            "UNWIND $uuids AS u MATCH (e:Episodic {uuid: u}) "
            f"WHERE e.group_id = $group_id AND ({_READY}) "
            "SET e.status = 'processing', e.lease_owner = $owner, e.lease_expires_at = $until, "
            "e.attempts = coalesce(e.attempts, 0) + 1 RETURN properties(e) AS ep",
            owner=owner,
            uuids=uuids,
            now=self._t(now),
            until=self._t(until),
        )
        nodes = [EpisodicNode.model_validate(self._decode(r["ep"])) for r in rows]
        return sorted(nodes, key=lambda e: (e.valid_at, e.queued_at or e.created_at, e.uuid))

    async def renew(self, group_id: str, owner: str, uuids: list[str], until: datetime) -> set[str]:
        """Extend the leases `owner` still holds; the uuids it still holds."""
        if not uuids:
            return set()
        rows = await self._q(
            group_id,
            f"UNWIND $uuids AS u MATCH (e:Episodic {{uuid: u}}) WHERE {_HELD} "
            "SET e.lease_expires_at = $until RETURN e.uuid AS uuid",
            owner=owner,
            uuids=uuids,
            until=self._t(until),
        )
        return {r["uuid"] for r in rows}

    async def stage(self, group_id: str, uuid: str, owner: str, staged: str) -> bool:
        """Keep a finished extraction on the episode (while `owner` holds it), so a worker
        that takes it over does not ask the LLM again."""
        rows = await self._q(
            group_id,
            f"MATCH (e:Episodic {{uuid: $uuid}}) WHERE {_HELD} SET e.staged = $staged "
            "RETURN e.uuid AS uuid",
            uuid=uuid,
            owner=owner,
            staged=staged,
        )
        return bool(rows)

    async def release(
        self,
        group_id: str,
        uuid: str,
        owner: str,
        *,
        failed: bool,
        next_attempt_at: datetime | None = None,
        error: str | None = None,
        reason: str | None = None,
        llm_calls: int = 0,
        llm_tokens: int = 0,
        undo_attempt: bool = False,
    ) -> bool:
        """Give an episode `owner` holds back: queued again (from `next_attempt_at`) or, with
        `failed`, failed for good. `reason` is added to its failure reasons; `undo_attempt`
        (a worker stopping) does not count the claim as an attempt."""
        rows = await self._q(
            group_id,
            f"MATCH (e:Episodic {{uuid: $uuid}}) WHERE {_HELD} "
            "SET e.status = $status, e.lease_owner = null, e.lease_expires_at = null, "
            "e.next_attempt_at = $next, e.error = coalesce($error, e.error), "
            "e.failure_reasons = coalesce(e.failure_reasons, []) + $reasons, "
            "e.llm_calls = coalesce(e.llm_calls, 0) + $calls, "
            "e.llm_tokens = coalesce(e.llm_tokens, 0) + $tokens, "
            "e.attempts = e.attempts - $undo RETURN e.uuid AS uuid",
            uuid=uuid,
            owner=owner,
            status="failed" if failed else "queued",
            next=self._t(next_attempt_at),
            error=error,
            reasons=[reason] if reason else [],
            calls=llm_calls,
            tokens=llm_tokens,
            undo=int(undo_attempt),
        )
        return bool(rows)

    async def abandon(
        self, group_id: str, uuid: str, now: datetime, max_attempts: int, error: str
    ) -> bool:
        """Fail an episode whose lease lapsed `max_attempts` times: each worker that took it
        died (or was killed) with it, so a next one would likely die too."""
        rows = await self._q(
            group_id,
            "MATCH (e:Episodic {uuid: $uuid}) WHERE e.group_id = $group_id "
            f"AND e.status = 'processing' AND {unindexed('e.lease_expires_at')} <= $now "
            "AND e.attempts >= $max SET e.status = 'failed', e.lease_owner = null, "
            "e.lease_expires_at = null, e.error = $error, "
            "e.failure_reasons = coalesce(e.failure_reasons, []) + ['abandoned'] "
            "RETURN e.uuid AS uuid",
            uuid=uuid,
            now=self._t(now),
            max=max_attempts,
            error=error,
        )
        return bool(rows)

    async def session_activity(self, group_id: str, sessions: list[str]) -> dict[str, datetime]:
        """The latest enqueue time of each session: its last message."""
        if not sessions:
            return {}
        rows = await self._read(
            group_id,
            "UNWIND $sessions AS s MATCH (e:Episodic {session_id: s}) "
            "WHERE e.group_id = $group_id RETURN s AS session, max(e.queued_at) AS last",
            {"sessions": sorted(set(sessions)), "group_id": group_id},
        )
        return {r["session"]: self.dialect.decode_time(r["last"]) for r in rows if r["last"]}

    async def context_before(
        self, group_id: str, episode: EpisodicNode, limit: int
    ) -> list[EpisodicNode]:
        """The episodes before this one in the group's order (reference time, then arrival),
        extracted or still queued: the extraction context of a pipelined episode, the same
        as a one-by-one ingest in that order would give it."""
        rows = await self._read(
            group_id,
            "UNWIND ['ingested', 'queued', 'processing'] AS s MATCH (ep:Episodic {status: s}) "
            "WHERE ep.group_id = $group_id AND ep.uuid <> $uuid AND ep.source <> 'facts' AND "
            f"({unindexed('ep.valid_at')} < $valid_at OR (ep.valid_at = $valid_at AND "
            "coalesce(ep.queued_at, ep.created_at) < $queued_at)) "
            "RETURN properties(ep) AS ep "
            "ORDER BY ep.valid_at DESC, coalesce(ep.queued_at, ep.created_at) DESC "
            "LIMIT $max_rows",
            {
                "group_id": group_id,
                "uuid": episode.uuid,
                "max_rows": limit,
                "valid_at": self._t(episode.valid_at),
                "queued_at": self._t(episode.queued_at or episode.created_at),
            },
        )
        return list(reversed(self._episodes(rows)))

    async def queue_metrics(self, group_id: str, now: datetime) -> QueueMetrics:
        """Depth by state, the oldest waiting episode's age, write-to-searchable latency over
        the last LATENCY_SAMPLES episodes the queue completed, retries, failures by reason."""
        p = {"group_id": group_id}
        counts = {
            r["s"]: int(r["n"])
            for r in await self._read(
                group_id,
                "MATCH (e:Episodic) WHERE e.group_id = $group_id "
                "RETURN e.status AS s, count(e) AS n",
                p,
            )
        }
        oldest = await self._read(
            group_id,
            "UNWIND ['queued', 'processing'] AS s MATCH (e:Episodic {status: s}) "
            "WHERE e.group_id = $group_id RETURN min(e.queued_at) AS t",
            p,
        )
        through = (
            "MATCH (e:Episodic {status: 'ingested'}) WHERE e.group_id = $group_id "
            "AND e.queued_at IS NOT NULL "
        )
        done = await self._read(group_id, through + "RETURN count(e) AS n", p)
        recent = await self._read(
            group_id,
            through + "RETURN e.queued_at AS q, e.created_at AS c ORDER BY e.created_at DESC "
            "LIMIT $n",
            {**p, "n": LATENCY_SAMPLES},
        )
        retries = await self._read(
            group_id,
            "MATCH (e:Episodic) WHERE e.group_id = $group_id AND e.attempts > 1 "
            "RETURN sum(e.attempts - 1) AS n",
            p,
        )
        reasons = await self._read(
            group_id,
            "MATCH (e:Episodic) WHERE e.group_id = $group_id AND size(e.failure_reasons) > 0 "
            "UNWIND e.failure_reasons AS r RETURN r, count(*) AS n",
            p,
        )
        latencies = [
            (self.dialect.decode_time(r["c"]) - self.dialect.decode_time(r["q"])).total_seconds()
            for r in recent
        ]
        first = oldest[0]["t"] if oldest else None
        return QueueMetrics(
            queued=counts.get("queued", 0),
            processing=counts.get("processing", 0),
            done=int(done[0]["n"]) if done else 0,
            failed=counts.get("failed", 0),
            oldest_waiting_s=(now - self.dialect.decode_time(first)).total_seconds()
            if first is not None
            else None,
            latency_p50_s=percentile(latencies, 0.5),
            latency_p95_s=percentile(latencies, 0.95),
            latency_samples=len(latencies),
            retries=int(retries[0]["n"] or 0) if retries else 0,
            failures_by_reason={r["r"]: int(r["n"]) for r in reasons},
        )

    async def queued_groups(self, groups: Sequence[str]) -> list[str]:
        """Those of `groups` with episodes queued or processing."""
        out = []
        for g in groups:
            rows = await self._read(
                g,
                "UNWIND ['queued', 'processing'] AS s MATCH (e:Episodic {status: s}) "
                "WHERE e.group_id = $group_id RETURN e.uuid AS u LIMIT 1",
                {"group_id": g},
            )
            if rows:
                out.append(g)
        return out
