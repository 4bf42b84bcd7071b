"""An in-memory store holding just what the write path and the as-of reads need.

The timeline logic (`kg.ingest.timeline`, `kg.ingest.replay`, `kg.rollback`) is pure: it reads
live versions, episodes and entities, and hands back a WritePlan or RewritePlan. This store
answers those reads (`kg.schemas.store.ReplayStore`: the episode log and the timelines), the
as-of reads (`FactReader.facts`, `history`) and `Groups`, and applies those plans
(`PlanWriter.apply`, `rewrite`) in plain Python, with the same semantics as the Cypher in
`kg.store.cypher` (as-of filter, retirement only of unretired versions, orphan deletion, the
version check every write makes, ...),
so the property tests can run hundreds of examples with no server.
`tests/test_memory_store.py` checks it against the live store on sampled sequences, so it
cannot drift. Communities, search, metrics and transfer are not implemented: a call to them
fails with AttributeError rather than answering wrongly.

Reads hand out copies (as a real store does: the planners mutate what they read) and leave
the vectors out, as the Cypher store's row decoding does.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from pydantic import BaseModel

from kg.errors import WriteConflictError
from kg.schemas.graph import (
    AuditEvent,
    EdgeStatus,
    EntityNode,
    EpisodeStatus,
    EpisodicNode,
    Fact,
    FactEdge,
)
from kg.schemas.plan import GroupVersion, RewritePlan, WritePlan
from kg.schemas.store import (
    Community,
    FactQuery,
    PageAfter,
    PlanningNames,
    PlanningReads,
    TimelineKey,
)

M = TypeVar("M", bound=BaseModel)
_VECTORS = {"fact_embedding", "name_embedding", "content_embedding", "key_embedding"}


def _copy(model: M, *, vectors: bool = True) -> M:
    """Nothing shared with `model`: its other fields are immutable values, so copying the
    lists is enough. Built directly (the values are already valid): the property tests make
    hundreds of thousands of reads, and `model_copy` would be most of their time."""
    values = dict(model.__dict__)
    for name in _list_fields(type(model)):
        if values[name] is not None:
            values[name] = list(values[name]) if vectors or name not in _VECTORS else None
    copy = type(model).__new__(type(model))
    object.__setattr__(copy, "__dict__", values)
    object.__setattr__(copy, "__pydantic_fields_set__", set(model.model_fields_set))
    object.__setattr__(copy, "__pydantic_extra__", None)
    object.__setattr__(copy, "__pydantic_private__", None)
    return copy


@functools.cache
def _list_fields(cls: type[BaseModel]) -> tuple[str, ...]:
    return tuple(k for k, f in cls.model_fields.items() if "list" in str(f.annotation))


def _out(model: M) -> M:
    """A copy as a reader gets it: vectors left out, as `CypherStore._decode` does."""
    return _copy(model, vectors=False)


@dataclass
class _Group:
    episodes: dict[str, EpisodicNode] = field(default_factory=dict)
    entities: dict[str, EntityNode] = field(default_factory=dict)
    edges: dict[str, FactEdge] = field(default_factory=dict)  # insertion (creation) order
    mentions: set[tuple[str, str]] = field(default_factory=set)  # (episode, entity)
    audit: list[AuditEvent] = field(default_factory=list)


class MemoryStore:
    backend = "memory"
    embedding_dim: int | None = None

    def __init__(self) -> None:
        self._groups: dict[str, _Group] = {}
        self._versions: dict[str, GroupVersion] = {}

    def _g(self, group_id: str) -> _Group:
        return self._groups.get(group_id) or _Group()

    # -- reads the planners make ----------------------------------------------------------

    async def ensure_schema(self, group_id: str) -> None:
        return None

    async def episode_by_hash(self, group_id: str, content_hash: str) -> EpisodicNode | None:
        for ep in self._g(group_id).episodes.values():
            if ep.content_hash == content_hash:
                return _out(ep)
        return None

    async def entities_by_key(self, group_id: str, name_keys: list[str]) -> list[EntityNode]:
        wanted = set(name_keys)
        first: dict[str, EntityNode] = {}
        for e in sorted(self._g(group_id).entities.values(), key=lambda e: (e.created_at, e.uuid)):
            if e.name_key in wanted:
                first.setdefault(e.name_key, e)
        return [_out(e) for e in first.values()]

    async def live_edges(self, group_id: str, keys: list[TimelineKey]) -> list[FactEdge]:
        return self._timeline(group_id, keys, live_only=True)

    async def planning_reads(self, group_id: str, names: PlanningNames) -> PlanningReads:
        hashes, keys = set(names.content_hashes), set(names.idempotency_keys)
        name_keys, timelines = names.name_keys, names.timelines
        g = self._g(group_id)
        since = {(t.subject_key, t.predicate, t.object_key): t.since for t in timelines}
        key = {u: e.name_key for u, e in g.entities.items()}

        def bears(e: FactEdge) -> bool:
            s, o = key[e.source_node_uuid], key[e.target_node_uuid]
            at = since.get((s, e.name, None)) or since.get((s, e.name, o))
            return at is not None and (e.invalid_at is None or e.invalid_at > at or e.valid_at > at)

        return PlanningReads(
            episodes=[
                _out(ep)
                for ep in g.episodes.values()
                if ep.content_hash in hashes or ep.idempotency_key in keys
            ],
            entities=[
                _out(e)
                for e in sorted(g.entities.values(), key=lambda e: (e.created_at, e.uuid))
                if e.name_key in set(name_keys)
            ],
            edges=[_out(e) for e in g.edges.values() if e.expired_at is None and bears(e)],
            communities=False,
        )

    async def timeline_versions(self, group_id: str, keys: list[TimelineKey]) -> list[FactEdge]:
        return self._timeline(group_id, keys, live_only=False)

    def _timeline(
        self, group_id: str, keys: list[TimelineKey], *, live_only: bool
    ) -> list[FactEdge]:
        def on(e: FactEdge, k: TimelineKey) -> bool:
            return (
                e.source_node_uuid == k.source_uuid
                and e.name == k.predicate
                and (k.target_uuid is None or e.target_node_uuid == k.target_uuid)
            )

        return [
            _out(e)
            for e in self._g(group_id).edges.values()
            if (not live_only or e.expired_at is None) and any(on(e, k) for k in keys)
        ]

    async def episodes(self, group_id: str, uuids: list[str]) -> list[EpisodicNode]:
        eps = self._g(group_id).episodes
        return _oldest_first(eps[u] for u in set(uuids) if u in eps)

    async def find_episodes(
        self,
        group_id: str,
        source_description: str | None,
        since: datetime | None,
        *,
        include_rolled_back: bool = False,
    ) -> list[EpisodicNode]:
        return _oldest_first(
            ep
            for ep in self._g(group_id).episodes.values()
            if (include_rolled_back or ep.status == EpisodeStatus.ingested)
            and (source_description is None or ep.source_description == source_description)
            and (since is None or ep.created_at >= since)
        )

    async def episode_page(
        self,
        group_id: str,
        limit: int,
        after: PageAfter | None = None,
        *,
        quarantined: bool = False,
    ) -> list[EpisodicNode]:
        newest = sorted(
            (
                ep
                for ep in self._g(group_id).episodes.values()
                if (not quarantined or ep.quarantine is not None)
                and (after is None or (ep.created_at, ep.uuid) < (after.created_at, after.uuid))
            ),
            key=lambda ep: (ep.created_at, ep.uuid),
            reverse=True,
        )
        return [_out(ep) for ep in newest[:limit]]

    def _turns(self, group_id: str, session_id: str) -> list[EpisodicNode]:
        live = (EpisodeStatus.ingested, EpisodeStatus.queued, EpisodeStatus.processing)
        turns = [
            ep
            for ep in self._g(group_id).episodes.values()
            if ep.session_id == session_id and ep.status in live and ep.source != "facts"
        ]
        return sorted(turns, key=lambda ep: (ep.valid_at, ep.queued_at or ep.created_at))

    async def turn_before(self, group_id: str, episode: EpisodicNode) -> EpisodicNode | None:
        if episode.session_id is None:
            return None
        at = (episode.valid_at, episode.queued_at or episode.created_at)
        before = [
            t
            for t in self._turns(group_id, episode.session_id)
            if t.uuid != episode.uuid and (t.valid_at, t.queued_at or t.created_at) < at
        ]
        return _out(before[-1]) if before else None

    async def session_turns(self, group_id: str, session_id: str) -> list[EpisodicNode]:
        return [_out(t) for t in self._turns(group_id, session_id)]

    async def audit_log(self, group_id: str, limit: int) -> list[AuditEvent]:
        events = sorted(self._g(group_id).audit, key=lambda a: a.created_at, reverse=True)
        return [_out(a) for a in events[:limit]]

    # -- the as-of reads ------------------------------------------------------------------

    def _fact(self, g: _Group, e: FactEdge) -> Fact:
        s, o = g.entities[e.source_node_uuid], g.entities[e.target_node_uuid]
        # Built directly like `_copy`: every value comes from a validated model.
        return Fact.model_construct(subject=s.name, predicate=e.name, object=o.name, edge=_out(e))

    def _matching(
        self, g: _Group, subject_key: str | None, predicate: str | None, object_key: str | None
    ) -> list[FactEdge]:
        return [
            e
            for e in g.edges.values()
            if (subject_key is None or g.entities[e.source_node_uuid].name_key == subject_key)
            and (predicate is None or e.name == predicate)
            and (object_key is None or g.entities[e.target_node_uuid].name_key == object_key)
        ]

    async def facts(self, query: FactQuery) -> list[Fact]:
        """True at `valid_at` as believed at `known_at`: the filter in CypherStore.facts."""
        g = self._g(query.group_id)
        v, k = query.valid_at, query.known_at
        hits = [
            e
            for e in self._matching(g, query.subject_key, query.predicate, query.object_key)
            if e.valid_at <= v
            and (e.invalid_at is None or e.invalid_at > v)
            and e.created_at <= k
            and (e.expired_at is None or e.expired_at > k)
            and (query.include_contested or e.status is EdgeStatus.active)
        ]
        hits.sort(key=lambda e: (g.entities[e.source_node_uuid].name, e.name, e.valid_at, e.uuid))
        return [self._fact(g, e) for e in hits[: query.limit]]

    async def history(
        self,
        group_id: str,
        subject_key: str | None,
        predicate: str | None,
        object_key: str | None,
        limit: int,
    ) -> list[Fact]:
        g = self._g(group_id)
        hits = self._matching(g, subject_key, predicate, object_key)
        hits.sort(
            key=lambda e: (
                g.entities[e.source_node_uuid].name,
                e.name,
                e.valid_at,
                e.created_at,
                e.uuid,
            )
        )
        return [self._fact(g, e) for e in hits[:limit]]

    async def contested(self, group_id: str, limit: int) -> list[Fact]:
        g = self._g(group_id)
        hits = [e for e in g.edges.values() if e.expired_at is None and e.status == "contested"]
        hits.sort(key=lambda e: (e.created_at, e.uuid), reverse=True)
        return [self._fact(g, e) for e in hits[:limit]]

    async def communities(self, group_id: str, having: list[str] | None = None) -> list[Community]:
        return []  # this store never holds communities (write_communities is not implemented)

    async def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    async def groups(self) -> list[str]:
        return sorted(self._groups)

    async def close(self) -> None:
        return None

    # -- writes: all checks first, then the changes, so a refused plan writes nothing ------

    async def version(self, group_id: str) -> GroupVersion:
        return self._versions.get(group_id, GroupVersion())

    def _fence(
        self, group_id: str, base: GroupVersion | None, tx: datetime | None, **hold: str | None
    ) -> GroupVersion:
        """The check and the new version every write of the Cypher store makes (Fence)."""
        current = self._versions.get(group_id, GroupVersion())
        if base is not None and base.token != current.token:
            raise WriteConflictError(f"group {group_id!r} changed; nothing written")
        times = [t for t in (current.last_tx, tx) if t is not None]
        return GroupVersion(
            token=uuid.uuid4().hex,
            writes=current.writes + 1,
            last_tx=max(times) if times else None,
            hold=hold.get("hold", current.hold),
        )

    async def set_hold(
        self, group_id: str, base: GroupVersion | None, hold: str | None
    ) -> GroupVersion:
        self._versions[group_id] = version = self._fence(group_id, base, None, hold=hold)
        return version

    async def apply_many(
        self, plans: list[WritePlan], names: PlanningNames | None
    ) -> tuple[GroupVersion, PlanningReads | None]:
        """Each plan as `apply` writes it, the version checked once (at the first's base)."""
        group = plans[0].group_id
        version = self._fence(group, plans[0].base, plans[-1].episode.created_at)
        for plan in plans:
            await self.apply(plan.model_copy(update={"base": None}))
        self._versions[group] = version  # one write
        return version, None if names is None else await self.planning_reads(group, names)

    async def apply(self, plan: WritePlan) -> GroupVersion:
        version = self._fence(plan.group_id, plan.base, plan.episode.created_at)
        g = self._groups.setdefault(plan.group_id, _Group())
        entities = set(g.entities) | {n.uuid for n in plan.new_entities}
        for e in plan.new_edges:
            # The live store's MATCH would silently create nothing: a plan that names an
            # unknown endpoint is a planner bug, so say so.
            assert {e.source_node_uuid, e.target_node_uuid} <= entities, f"dangling edge {e}"
        for r in plan.reinforcements:
            assert r.uuid in g.edges, f"reinforces unknown version {r.uuid}"
        if plan.replaces_failed:
            failed = g.episodes.get(plan.replaces_failed)
            if failed is not None and failed.status == EpisodeStatus.failed:
                self._delete_episode(g, failed.uuid)
        g.episodes[plan.episode.uuid] = _copy(plan.episode)
        for n in plan.new_entities:
            g.entities[n.uuid] = _copy(n)
        g.mentions |= {(plan.episode.uuid, u) for u in plan.mentions if u in g.entities}
        for r in plan.retirements:
            stored = g.edges.get(r.uuid)
            if stored is not None and stored.expired_at is None:
                stored.expired_at = r.expired_at
        for r in plan.reinforcements:
            stored = g.edges[r.uuid]
            stored.episodes.append(r.episode_uuid)
            stored.episode_valid_at.append(r.valid_at)
        for e in plan.new_edges:
            g.edges[e.uuid] = _copy(e)
        self._versions[plan.group_id] = version
        return version

    async def rewrite(self, plan: RewritePlan) -> GroupVersion:
        if plan.rolled_back and plan.audit is None:
            raise ValueError("a rewrite that rolls episodes back needs its audit event")
        tx = plan.audit.created_at if plan.audit is not None else None
        version = self._fence(plan.group_id, plan.base, tx)
        g = self._groups.setdefault(plan.group_id, _Group())
        for u in plan.delete_edges:
            g.edges.pop(u, None)
        for e in plan.new_edges:
            assert {e.source_node_uuid, e.target_node_uuid} <= set(g.entities), f"dangling {e}"
            g.edges[e.uuid] = _copy(e)
        dropped = set(plan.drop_mentions_from)
        g.mentions = {(ep, n) for ep, n in g.mentions if ep not in dropped}
        for u in plan.delete_episodes:
            self._delete_episode(g, u)
        for ep in plan.new_episodes:
            g.episodes[ep.uuid] = _copy(ep)
        g.mentions |= {(u, n) for u, ns in plan.new_mentions.items() for n in ns}
        assert not plan.delete_communities and not plan.scrub_summaries, "not implemented"
        for u in plan.delete_entities:
            self._delete_entity(g, u)
        for u in plan.orphan_candidates:
            if u in g.entities and not _referenced(g, u):
                self._delete_entity(g, u)
        for u in plan.rolled_back:
            if u in g.episodes:
                g.episodes[u].status = EpisodeStatus.rolled_back
        for k in plan.rekey:
            if k.uuid in g.episodes:
                g.episodes[k.uuid].search_key = k.search_key
                g.episodes[k.uuid].key_embedding = k.key_embedding
        if plan.audit is not None:
            g.audit.append(_copy(plan.audit))
        self._versions[plan.group_id] = version
        return version

    @staticmethod
    def _delete_episode(g: _Group, uuid: str) -> None:
        g.episodes.pop(uuid, None)
        g.mentions = {(ep, n) for ep, n in g.mentions if ep != uuid}

    @staticmethod
    def _delete_entity(g: _Group, uuid: str) -> None:
        """DETACH DELETE: its edges and mentions go with it."""
        g.entities.pop(uuid, None)
        g.edges = {
            k: e for k, e in g.edges.items() if uuid not in (e.source_node_uuid, e.target_node_uuid)
        }
        g.mentions = {(ep, n) for ep, n in g.mentions if n != uuid}


def _referenced(g: _Group, entity: str) -> bool:
    """Any RELATES_TO edge (either direction) or MENTIONS edge still touches it."""
    return any(entity in (e.source_node_uuid, e.target_node_uuid) for e in g.edges.values()) or any(
        n == entity for _, n in g.mentions
    )


def _oldest_first(episodes: Iterable[EpisodicNode]) -> list[EpisodicNode]:
    return [_out(ep) for ep in sorted(episodes, key=lambda ep: (ep.created_at, ep.uuid))]
