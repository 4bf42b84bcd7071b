"""A group's structured episodes planned in batches from one planning read each
(`BatchTimelines`), and what one batch read and wrote carried into the next, so that the
next read asks only for what is not held yet (issue 30: re-reading in every batch the
entities and timelines the batches before it had read or made cost rows per episode that
grew with the group, not with the batch).

Carrying is only sound at the version the holder describes: kg.planners.Ahead hands a held
`BatchTimelines` to a batch only when the batch plans at the version its own write made
current, and the write is fenced at that version as every write is.

What is held stays bounded (`keep_within`): closed versions are let go first (the timeline
is then held only from their end on), then the least recently named entities with their
timelines; anything let go is unknown again, so the next read asks for it.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from kg.schemas.graph import EntityNode, EpisodicNode, FactEdge
from kg.schemas.plan import WritePlan
from kg.schemas.store import NamedTimeline, PlanningNames, PlanningReads, TimelineKey

# A held timeline: (subject key, predicate, object key of a multi-valued predicate).
_Named = tuple[str, str, str | None]


class BatchTimelines:
    """`Timelines` for one or several episodes of a group planned in order from one
    `PlanningReads` (read for them all), with no further round trip: each sees what was read
    plus what the plans before it write (`commit` applies a plan as the store would), so
    each plan is the one a one-by-one ingest makes. Versions are handed out as copies: a
    plan keeps what its episode saw, whatever later episodes make of it. A version the read
    returned that ended before one episode's facts cannot bear on them (see
    `NamedTimeline.since`).

    With `names` (what `reads` was read for), it also knows what it holds: every name key
    read (found or not) or made by a plan, every timeline read from its `since` on, and
    every timeline whose subject a plan made (all its versions were made here since).
    `unknown` tells the next batch's read what is left to fetch, `renew` takes its reply,
    `keep_within` bounds what is carried."""

    def __init__(self, reads: PlanningReads, names: PlanningNames | None = None) -> None:
        self._entities: dict[str, EntityNode] = {}
        # Live versions by timeline (source, predicate), and each version's timeline.
        self._edges: dict[tuple[str, str], dict[str, FactEdge]] = {}
        self._at: dict[str, tuple[str, str]] = {}
        self._named: set[str] = set()
        self._since: dict[_Named, datetime] = {}
        self._made: set[str] = set()
        # A made subject's timelines are held from this time on (raised when a closed version
        # of it is let go; absent: from the beginning).
        self._made_since: dict[str, datetime] = {}
        # Name keys by when a batch last named them, oldest first: the order they are let go.
        self._recent: dict[str, None] = {}
        self.renew(reads, names)

    def renew(self, reads: PlanningReads, names: PlanningNames | None) -> None:
        """Take a planning read made at the version this holds, for `names` (`unknown` of
        the batch's names): the batch's duplicates are the ones read now."""
        self._episodes = list(reads.episodes)
        # Every content hash and idempotency key among them, ever (a stale one only costs a
        # scan): most episodes duplicate none, and are told so without one.
        self._hashes = {ep.content_hash for ep in self._episodes}
        self._keys = {ep.idempotency_key for ep in self._episodes}
        self.communities = reads.communities
        for n in reads.entities:  # in (created_at, uuid) order: the first per name counts
            self._entities.setdefault(n.name_key, n)
        for e in reads.edges:
            if e.uuid not in self._at:  # one held is the store's, as the plans left it
                self._keep(e)
        if names is not None:
            self._named.update(names.name_keys)
            self._touch(names.name_keys)
            for t in names.timelines:
                k = (t.subject_key, t.predicate, t.object_key)
                self._since[k] = min(self._since.get(k, t.since), t.since)

    def unknown(self, names: PlanningNames) -> PlanningNames:
        """`names` less what this holds: what a read must still fetch (the duplicates
        always: episodes are not held across batches)."""
        return names.model_copy(
            update={
                "name_keys": tuple(k for k in names.name_keys if k not in self._named),
                "timelines": tuple(t for t in names.timelines if not self._holds(t)),
            }
        )

    def _holds(self, t: NamedTimeline) -> bool:
        if t.subject_key in self._made and self._made_since.get(t.subject_key, t.since) <= t.since:
            return True
        since = self._since.get((t.subject_key, t.predicate, t.object_key))
        return since is not None and since <= t.since

    @property
    def size(self) -> int:
        """What it holds, to bound what is carried."""
        return len(self._entities) + len(self._at) + len(self._since)

    def _keep(self, e: FactEdge) -> None:
        at = self._at[e.uuid] = (e.source_node_uuid, e.name)
        self._edges.setdefault(at, {})[e.uuid] = e

    def duplicates(self, content_hash: str, idempotency_key: str | None) -> list[EpisodicNode]:
        """The episodes read or planned with this content hash or idempotency key."""
        if content_hash not in self._hashes and (
            idempotency_key is None or idempotency_key not in self._keys
        ):
            return []
        return [
            ep
            for ep in self._episodes
            if ep.content_hash == content_hash
            or (idempotency_key is not None and ep.idempotency_key == idempotency_key)
        ]

    async def entities_by_key(self, group_id: str, name_keys: list[str]) -> list[EntityNode]:
        return [self._entities[k] for k in dict.fromkeys(name_keys) if k in self._entities]

    async def live_edges(self, group_id: str, keys: list[TimelineKey]) -> list[FactEdge]:
        found: dict[str, FactEdge] = {}
        for k in keys:
            for e in self._edges.get((k.source_uuid, k.predicate), {}).values():
                if k.target_uuid is None or e.target_node_uuid == k.target_uuid:
                    found.setdefault(e.uuid, e)
        return [_copy(e) for e in found.values()]

    async def timeline_versions(self, group_id: str, keys: list[TimelineKey]) -> list[FactEdge]:
        raise NotImplementedError("a planning read holds the live versions only")

    def commit(self, plan: WritePlan) -> None:
        """What the group holds once `plan` is written."""
        if plan.replaces_failed is not None:
            self._episodes = [ep for ep in self._episodes if ep.uuid != plan.replaces_failed]
        self._episodes.append(plan.episode)
        self._hashes.add(plan.episode.content_hash)
        self._keys.add(plan.episode.idempotency_key)
        for n in plan.new_entities:
            self._entities.setdefault(n.name_key, n)
            self._named.add(n.name_key)
            self._made.add(n.name_key)
            self._touch((n.name_key,))
        for r in plan.retirements:
            if (at := self._at.pop(r.uuid, None)) is not None:
                del self._edges[at][r.uuid]
        for f in plan.reinforcements:
            if (at := self._at.get(f.uuid)) is not None:
                # A new version in its place: the one held may be an earlier plan's own edge.
                e = self._edges[at][f.uuid]
                self._edges[at][f.uuid] = e.model_copy(
                    update={
                        "episodes": [*e.episodes, f.episode_uuid],
                        "episode_valid_at": [*e.episode_valid_at, f.valid_at],
                    }
                )
        for e in plan.new_edges:
            self._keep(e)  # the plan's own: never changed here, and lent only as copies

    def _touch(self, keys: tuple[str, ...]) -> None:
        for k in keys:
            self._recent.pop(k, None)
            self._recent[k] = None

    def keep_within(self, most: int, then: PlanningNames) -> None:
        """Bound what is carried into the batch that names `then` (named last, so let go
        last): past `most`, let go of closed versions, then of the least recently named
        entities with their timelines, down to three quarters of `most` (a pass over what is
        held is paid once per quarter, not per batch). What is let go is unknown again."""
        self._touch(then.name_keys)
        if self.size <= most:
            return
        self._let_go_closed()
        self._let_go_least_recent(self.size - most * 3 // 4)

    def _let_go_closed(self) -> None:
        """Versions that ended, with their timeline held from their end on: a read from an
        earlier `since` asks for it again (read from a later one, it returns no such version)."""
        key_of = {n.uuid: k for k, n in self._entities.items()}
        ends: dict[tuple[str, str], datetime] = {}  # (subject key, predicate): latest end let go
        for uuid, at in list(self._at.items()):
            e = self._edges[at][uuid]
            if e.invalid_at is None or (k := key_of.get(at[0])) is None:
                continue  # (a subject held under another of its name's entities: kept)
            del self._at[uuid], self._edges[at][uuid]
            end = max(e.valid_at, e.invalid_at)
            ends[(k, at[1])] = max(ends.get((k, at[1]), end), end)
        for at in [at for at in self._edges if not self._edges[at]]:
            del self._edges[at]
        for named, since in self._since.items():
            if (raised := ends.get((named[0], named[1]))) is not None and raised > since:
                self._since[named] = raised
        for (k, _), end in ends.items():
            if k in self._made:
                self._made_since[k] = max(self._made_since.get(k, end), end)

    def _let_go_least_recent(self, over: int) -> None:
        """Entities by when they were last named, oldest first, with their timelines (the
        versions whose subject they are), until `over` fewer things are held."""
        if over <= 0:
            return
        versions: Counter[str] = Counter()
        for (src, _), held in self._edges.items():
            versions[src] += len(held)
        timelines = Counter(named[0] for named in self._since)
        gone: set[str] = set()
        for k in self._recent:
            if over <= 0:
                break
            gone.add(k)
            n = self._entities.get(k)
            over -= timelines[k] + (1 + versions[n.uuid] if n is not None else 0)
        uuids: set[str] = set()
        for k in gone:
            del self._recent[k]
            self._named.discard(k)
            self._made.discard(k)
            self._made_since.pop(k, None)
            if (n := self._entities.pop(k, None)) is not None:
                uuids.add(n.uuid)
        self._since = {named: s for named, s in self._since.items() if named[0] not in gone}
        for at in [at for at in self._edges if at[0] in uuids]:
            for uuid in self._edges.pop(at):
                del self._at[uuid]


def _copy(e: FactEdge) -> FactEdge:
    """A version planning may change (its support lists) without changing `e`."""
    return e.model_copy(
        update={"episodes": list(e.episodes), "episode_valid_at": list(e.episode_valid_at)}
    )
