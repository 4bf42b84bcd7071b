"""Rollback: undo episodes by recomputing every timeline they touched, without them.

Removing only what an episode wrote is not enough once later episodes built on it (a later
move closes the poisoned value, not the true one it displaced). So kg replays, at their
original transaction times, all the *other* episodes that touched those timelines, and swaps
in the result: facts only the episode supported disappear, facts it closed re-open (unless
another episode also closed them), reinforcements lose it. The outcome is the graph
that ingesting everything but the episode would have produced, at every valid and
transaction time. Versions that come out identical keep their uuids. The episode itself stays,
marked rolled back (so re-adding it is still a no-op), and an audit event records the rollback.

An episode still in the background queue (queued, leased by a worker, or failed) has written
nothing yet: rolling it back cancels it. It is marked rolled back in the same atomic write,
its lease cleared, so no worker claims it again and the write of a worker that holds it is
refused by its lease guard (kg.store.cypher.queue): it is never extracted into the graph,
whichever of the two comes first.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from kg.errors import InputError, NotFoundError
from kg.ingest.names import name_key
from kg.ingest.replay import ReplayEpisode, replay_timelines
from kg.ingest.structured import new_fact, stored_facts
from kg.schemas.graph import AuditEvent, EntityNode, EpisodeStatus, EpisodicNode, FactEdge
from kg.schemas.ontology import Ontology
from kg.schemas.plan import RewritePlan
from kg.schemas.store import ReplayStore, TimelineKey, Timelines
from kg.search_keys import rekeys

M = TypeVar("M", bound=BaseModel)
# Episodes the background queue has not written yet: rolling one back cancels it.
UNWRITTEN = (EpisodeStatus.queued, EpisodeStatus.processing, EpisodeStatus.failed)


class FactChange(BaseModel):
    model_config = ConfigDict(frozen=True)

    subject: str
    predicate: str
    object: str
    valid_at: datetime
    invalid_at: datetime | None
    status: str


class RollbackReport(BaseModel):
    group_id: str
    episodes: list[str] = Field(description="Episodes this rollback undoes.")
    already_rolled_back: list[str] = Field(default_factory=list)
    cancelled: list[str] = Field(
        default_factory=list,
        description="Queued, leased or failed episodes this rollback "
        "cancels: marked rolled back before any of their facts were written.",
    )
    removed: list[FactChange] = Field(
        default_factory=list, description="Believed now before, gone after."
    )
    restored: list[FactChange] = Field(
        default_factory=list, description="Believed now after, not before (re-opened)."
    )
    versions_deleted: int = 0
    versions_created: int = 0
    versions_kept: int = 0
    versions_reopened: int = Field(default=0, description="Rewritten under their stored uuid.")
    applied: bool = False

    @property
    def noop(self) -> bool:
        return not self.episodes and not self.cancelled


def _signature(v: FactEdge) -> tuple[Any, ...]:
    return (
        v.source_node_uuid,
        v.target_node_uuid,
        v.name,
        v.fact,
        v.valid_at,
        v.invalid_at,
        v.created_at,
        v.expired_at,
        tuple(v.episodes),
        tuple(v.episode_valid_at),
        v.invalidated_by,
        v.channel,
        v.trust,
        v.extractor,
        v.status,
    )


def _unexpired(v: FactEdge) -> tuple[Any, ...]:
    return _signature(v.model_copy(update={"expired_at": None}))


def _reconcile(
    old: list[FactEdge], new: list[FactEdge]
) -> tuple[list[FactEdge], list[FactEdge], list[FactEdge]]:
    """(kept old, old to delete, new to create).

    Identical versions are kept as stored. A version that differs only in `expired_at` (a fact
    the undone episode had retired, now re-opened) is rewritten under its stored uuid, so
    re-opened facts keep their identity and links to them stay valid.
    """
    by_sig: dict[tuple[Any, ...], list[FactEdge]] = {}
    for v in old:
        by_sig.setdefault(_signature(v), []).append(v)
    rename: dict[str, str] = {}
    matched: dict[str, FactEdge] = {}
    for v in new:
        pool = by_sig.get(_signature(v))
        if pool:
            stored = pool.pop()
            rename[v.uuid] = stored.uuid
            matched[v.uuid] = stored
    taken = {s.uuid for s in matched.values()}
    by_unexpired: dict[tuple[Any, ...], list[FactEdge]] = {}
    for v in old:
        if v.uuid not in taken:
            by_unexpired.setdefault(_unexpired(v), []).append(v)
    for v in new:
        if v.uuid not in matched and (pool := by_unexpired.get(_unexpired(v))):
            rename[v.uuid] = pool.pop().uuid  # same identity, new belief interval

    def mapped(u: str | None) -> str | None:
        return rename.get(u, u) if u is not None else None

    # A match only holds if its links (fact, supersedes, closing edge) also point the same way.
    new_by_uuid = {v.uuid: v for v in new}
    for new_uuid, stored in list(matched.items()):
        v = new_by_uuid[new_uuid]
        if (mapped(v.fact_uuid), mapped(v.supersedes), mapped(v.invalidated_edge)) != (
            stored.fact_uuid,
            stored.supersedes,
            stored.invalidated_edge,
        ):
            del matched[new_uuid]
            del rename[new_uuid]
    kept_uuids = {s.uuid for s in matched.values()}
    kept = [v for v in old if v.uuid in kept_uuids]
    delete = [v for v in old if v.uuid not in kept_uuids]
    create = [
        v.model_copy(
            update={
                "uuid": mapped(v.uuid),
                "fact_uuid": mapped(v.fact_uuid),
                "supersedes": mapped(v.supersedes),
                "invalidated_edge": mapped(v.invalidated_edge),
            }
        )
        for v in new
        if v.uuid not in matched
    ]
    return kept, delete, create


def _by_json(items: Iterable[M]) -> list[M]:
    """Deterministic order for report lists and timeline keys."""
    return sorted(items, key=lambda x: x.model_dump_json())


@dataclass
class _Rebuilt:
    kept: list[FactEdge]
    delete: list[FactEdge]
    create: list[FactEdge]
    removed: list[FactChange]
    restored: list[FactChange]


def _rebuild(
    group_id: str,
    old: list[FactEdge],
    replay: list[ReplayEpisode],
    keys: set[TimelineKey],
    entities: dict[str, EntityNode],
) -> _Rebuilt:
    """Replay onto `keys`, reconcile with the stored versions, and diff the current view."""
    kept, delete, create = _reconcile(old, replay_timelines(group_id, replay, keys))
    names = {e.uuid: e.name for e in entities.values()}
    before, after = _current(old, names), _current(kept + create, names)
    return _Rebuilt(
        kept,
        delete,
        create,
        _by_json((before - after).elements()),
        _by_json((after - before).elements()),
    )


def _current(versions: list[FactEdge], names: dict[str, str]) -> Counter[FactChange]:
    def change(v: FactEdge) -> FactChange:
        return FactChange(
            subject=names.get(v.source_node_uuid, v.source_node_uuid),
            predicate=v.name,
            object=names.get(v.target_node_uuid, v.target_node_uuid),
            valid_at=v.valid_at,
            invalid_at=v.invalid_at,
            status=v.status.value,
        )

    return Counter(change(v) for v in versions if v.expired_at is None)


async def _resolve(
    store: Timelines, group_id: str, episodes: list[EpisodicNode], ontology: Ontology
) -> tuple[list[ReplayEpisode], dict[str, EntityNode]]:
    try:
        parsed = [(ep, stored_facts(ep)) for ep in episodes]
    except ValueError as exc:
        raise InputError(str(exc)) from None
    keys = sorted(
        {name_key(n) for _, facts in parsed for f in facts for n in (f.subject, f.object)}
    )
    entities = {e.name_key: e for e in await store.entities_by_key(group_id, keys)}
    replay = []
    for ep, facts in parsed:
        try:
            news = [
                new_fact(f, ontology.resolve_predicate(f.predicate), entities, ep.valid_at)
                for f in facts
            ]
        except KeyError as exc:
            raise InputError(f"episode {ep.uuid} names an entity that is gone: {exc}") from None
        except ValueError as exc:
            raise InputError(f"episode {ep.uuid}: {exc}") from None
        replay.append(
            ReplayEpisode(
                uuid=ep.uuid,
                created_at=ep.created_at,
                channel=ep.channel.value,
                trust=int(ep.trust),
                extractor=ep.extractor,
                facts=news,
            )
        )
    return replay, entities


class ReplayReport(BaseModel):
    group_id: str
    episodes: int
    versions_matching: int
    only_in_graph: list[FactChange] = Field(default_factory=list, description="Believed now.")
    only_in_replay: list[FactChange] = Field(default_factory=list, description="Believed now.")
    versions_deleted: int = 0
    versions_created: int = 0
    applied: bool = False

    @property
    def identical(self) -> bool:
        return self.versions_deleted == 0 and self.versions_created == 0


async def plan_replay(
    store: ReplayStore, ontology: Ontology, group_id: str
) -> tuple[RewritePlan, ReplayReport]:
    """Rebuild every timeline of the group from its episode log with today's ontology."""
    episodes = await store.find_episodes(group_id, None, None)
    replay, entities = await _resolve(store, group_id, episodes, ontology)
    keys = {f.key for ep in replay for f in ep.facts}
    # Read by (subject, predicate) whatever the cardinality: that also finds versions keyed
    # differently before an ontology change (a predicate that became multi-valued).
    wide = {TimelineKey(source_uuid=k.source_uuid, predicate=k.predicate) for k in keys}
    old = await store.timeline_versions(group_id, _by_json(wide))
    r = _rebuild(group_id, old, replay, keys, entities)
    report = ReplayReport(
        group_id=group_id,
        episodes=len(episodes),
        versions_matching=len(r.kept),
        only_in_graph=r.removed,
        only_in_replay=r.restored,
        versions_deleted=len(r.delete),
        versions_created=len(r.create),
    )
    plan = RewritePlan(
        group_id=group_id, delete_edges=[v.uuid for v in r.delete], new_edges=r.create
    )
    return plan, report


def _report_of(
    group_id: str, asked: list[EpisodicNode], kind: str
) -> tuple[list[EpisodicNode], RollbackReport]:
    """The episodes a rollback undoes (the ingested ones), and its report's first lines:
    queued ones are cancelled (by a rollback; an erasure deletes them)."""
    targets = [e for e in asked if e.status == EpisodeStatus.ingested]
    report = RollbackReport(
        group_id=group_id,
        episodes=[e.uuid for e in targets],
        already_rolled_back=[e.uuid for e in asked if e.status == EpisodeStatus.rolled_back],
        cancelled=[e.uuid for e in asked if e.status in UNWRITTEN] if kind == "rollback" else [],
    )
    return targets, report


async def plan_rollback(
    store: ReplayStore,
    ontology: Ontology,
    group_id: str,
    episode_uuids: list[str],
    now: datetime,
    *,
    kind: str = "rollback",
    extra: Sequence[EpisodicNode] = (),
) -> tuple[RewritePlan, RollbackReport]:
    """`extra`: episodes not stored yet that the replay counts among the others (an
    erasure's redacted copies, written by the same rewrite)."""
    found = {ep.uuid: ep for ep in await store.episodes(group_id, episode_uuids)}
    missing = [u for u in episode_uuids if u not in found]
    if missing:
        raise NotFoundError(f"no episode {missing[0]!r} in group {group_id!r}")
    targets, report = _report_of(group_id, [found[u] for u in dict.fromkeys(episode_uuids)], kind)
    if report.noop:
        return RewritePlan(group_id=group_id), report
    undone = {e.uuid for e in targets}
    marked = sorted(undone | set(report.cancelled)) if kind == "rollback" else []

    target_replay, entities = await _resolve(store, group_id, targets, ontology)
    keys: set[TimelineKey] = {f.key for ep in target_replay for f in ep.facts}
    old = await store.timeline_versions(group_id, _by_json(keys))
    supporters = {ep for v in old for ep in v.episodes} | {
        v.invalidated_by for v in old if v.invalidated_by
    }
    others = [
        ep
        for ep in await store.episodes(group_id, sorted(supporters - undone))
        if ep.status == EpisodeStatus.ingested
    ] + list(extra)
    others_replay, more_entities = await _resolve(store, group_id, others, ontology)
    entities.update(more_entities)
    r = _rebuild(group_id, old, others_replay, keys, entities)
    report.removed, report.restored = r.removed, r.restored
    reopened = {v.uuid for v in r.delete} & {v.uuid for v in r.create}
    report.versions_deleted = len(r.delete) - len(reopened)
    report.versions_created = len(r.create) - len(reopened)
    report.versions_kept, report.versions_reopened = len(r.kept), len(reopened)

    mentioned = sorted(
        {f.source_uuid for ep in target_replay for f in ep.facts}
        | {f.target_uuid for ep in target_replay for f in ep.facts}
    )
    plan = RewritePlan(
        group_id=group_id,
        delete_edges=[v.uuid for v in r.delete],
        new_edges=r.create,
        drop_mentions_from=sorted(undone),
        orphan_candidates=mentioned,
        rolled_back=marked,
        audit=AuditEvent(
            uuid=str(uuidlib.uuid4()),
            group_id=group_id,
            kind=kind,
            created_at=now,
            episodes=marked,
            detail=json.dumps(
                {
                    "episodes": len(undone),
                    "versions_deleted": len(r.delete),
                    "versions_created": len(r.create),
                    "facts_removed": len(report.removed),
                    "facts_restored": len(report.restored),
                    "cancelled": len(report.cancelled),
                }
            ),
        ),
    )
    if kind == "rollback":  # an erasure deletes the episodes, and rekeys their neighbours
        plan.rekey = await rekeys(store, group_id, marked, rolled_back=marked)
    return plan, report
