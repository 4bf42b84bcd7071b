"""Erasure: physical deletion of a subject or a whole group. Erasure is not invalidation.

Erasing an entity removes every episode that names it (as an entity, or in its text under the
same normalisation the entity key uses: full-width letters, any run of whitespace, case), every
fact version touching it, the entities nothing else refers to afterwards, and the entity
itself. Facts about *other* subjects that those episodes supported are recomputed without
them, exactly as rollback does. Then the store compacts its files (FalkorDB rewrites the
append-only file, which otherwise still holds every command ever run); a store that cannot do
that online (Neo4j) says what remains on disk, and the receipt carries it. The audit event
records counts only, never the subject's name.

An erasure survives a crash: before anything is deleted, a `PendingErasure` record is written
(no erased text: the entity's uuid and a salted hash of its name key), and it is removed only
after the compaction. A record left by a crash is finished on the next open (`KG.open`) or
when the erasure is run again, whichever comes first; the receipt says when compaction ended.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import BaseModel

from kg.errors import NotFoundError
from kg.ingest.names import name_key
from kg.ingest.structured import new_uuid
from kg.rollback import plan_rollback
from kg.schemas.graph import EntityNode, EpisodeStatus, FactEdge
from kg.schemas.ontology import Ontology
from kg.schemas.plan import EpisodeKey, GroupVersion
from kg.schemas.store import (
    EpisodeLog,
    ErasureLog,
    FactReader,
    PendingErasure,
    PlanWriter,
    StoreAdmin,
    Timelines,
)
from kg.search_keys import rekeys

# Fills in the embeddings of rewritten fact versions and rebuilt episode keys.
Embed = Callable[[list[FactEdge], list[EpisodeKey]], Awaitable[None]]


class GroupEraser(FactReader, StoreAdmin, ErasureLog, Protocol):
    """What erasing a group uses: its counts before, the record, the drop and compaction."""


class EntityEraser(
    EpisodeLog, Timelines, FactReader, PlanWriter, StoreAdmin, ErasureLog, Protocol
):  # fmt: skip
    """What erasing a subject uses: a rollback plan (episode log, timelines), the facts and
    communities that touch it, the record, the rewrite and the compaction."""

    async def entities_by_uuid(self, group_id: str, uuids: list[str]) -> list[EntityNode]: ...


class ErasureReceipt(BaseModel):
    """What was removed; returned to the caller, never stored."""

    group_id: str
    subject: str | None
    episodes_deleted: int
    entities_deleted: int
    fact_versions_deleted: int
    other_facts_recomputed: int
    files_compacted: bool  # the store's files no longer hold what was erased
    communities_deleted: int = 0
    compacted_at: datetime | None = None
    resumed: bool = False  # finishing an erasure a crash interrupted
    # Where the store cannot scrub its files online: what may remain there, and the way out.
    residue: str | None = None


def subject_hash(record_uuid: str, key: str) -> str:
    """What a pending record keeps of the name: a re-run can match it, a reader learns
    nothing short of guessing the name (salted, so not across records)."""
    return hashlib.sha256(f"{record_uuid}\0{key}".encode()).hexdigest()


def _receipt(record: PendingErasure, subject: str | None, compacted_at: datetime | None,
             resumed: bool, residue: str | None) -> ErasureReceipt:  # fmt: skip
    return ErasureReceipt(
        group_id=record.group_id, subject=subject, episodes_deleted=record.episodes_deleted,
        entities_deleted=record.entities_deleted,
        fact_versions_deleted=record.fact_versions_deleted,
        other_facts_recomputed=record.other_facts_recomputed, files_compacted=residue is None,
        communities_deleted=record.communities_deleted, compacted_at=compacted_at,
        resumed=resumed, residue=residue,
    )  # fmt: skip


async def _compact_and_clear(
    store: GroupEraser, record: PendingErasure, subject: str | None, resumed: bool
) -> ErasureReceipt:
    residue = await store.compact()
    compacted_at = datetime.now(UTC) if residue is None else None
    await store.clear_erasure(record.uuid)
    return _receipt(record, subject, compacted_at, resumed, residue)


async def erase_group(store: GroupEraser, group_id: str, now: datetime) -> ErasureReceipt:
    pending = [p for p in await store.pending_erasures()
               if p.group_id == group_id and p.kind == "group"]  # fmt: skip
    if pending:
        record = pending[0]
    else:
        before = await store.stats(group_id, now)
        record = PendingErasure(
            uuid=new_uuid(), group_id=group_id, kind="group", created_at=now, deleted=True,
            episodes_deleted=before.episodes, entities_deleted=before.entities,
            fact_versions_deleted=before.edge_versions,
        )  # fmt: skip
        await store.record_erasure(record)
    await store.drop_group(group_id)
    return await _compact_and_clear(store, record, None, resumed=bool(pending))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for k, item in value.items():
            yield k
            yield from _strings(item)


def _texts(text: str) -> Iterator[str]:
    """The text, and if it is JSON (a JSON episode, a stored record) every string in it, so
    that an escaped "\\u00a0" or "\\n" is read as the character it stands for."""
    yield text
    try:
        value = json.loads(text)
    except ValueError:
        return
    yield from _strings(value)


def names_subject(text: str, key: str) -> bool:
    """Whether the text names the subject whose name key is `key`, read under the same
    normalisation (NFKC, case folding, whitespace collapsed): what kg itself would resolve
    to this entity, the text names."""
    pattern = re.compile(r"(?<!\w)" + re.escape(key) + r"(?!\w)")
    return any(pattern.search(name_key(t)) for t in _texts(text))


async def erase_entity(
    store: EntityEraser,
    ontology: Ontology,
    group_id: str,
    name: str,
    now: datetime,
    *,
    embed: Embed | None = None,
    base: GroupVersion | None = None,
) -> ErasureReceipt:
    """`base`: the group version the reads began at (kg.versioned); the rewrite checks it."""
    key = name_key(name)
    found = await store.entities_by_key(group_id, [key])
    if found:
        return await _erase(store, ontology, group_id, found[0], now, embed=embed, base=base)
    for record in await store.pending_erasures():  # a crash interrupted this very erasure
        if (record.group_id, record.kind) == (group_id, "entity") and (
            record.subject_hash == subject_hash(record.uuid, key)
        ):
            return await finish_erasure(store, ontology, record, now, embed=embed, subject=name,
                                        base=base)  # fmt: skip
    raise NotFoundError(f"no entity named {name!r} in group {group_id!r}")


async def finish_erasure(
    store: EntityEraser,
    ontology: Ontology,
    record: PendingErasure,
    now: datetime,
    *,
    embed: Embed | None = None,
    subject: str | None = None,
    base: GroupVersion | None = None,
) -> ErasureReceipt:
    """Carry a recorded erasure to its end: drop the group again (idempotent), or erase the
    entity if it is still there (the crash came before the delete), then compact."""
    if record.kind == "group":
        await store.drop_group(record.group_id)
    elif not record.deleted and record.entity_uuid is not None:
        still = await store.entities_by_uuid(record.group_id, [record.entity_uuid])
        if still:
            receipt = await _erase(store, ontology, record.group_id, still[0], now,
                                   embed=embed, record=record, base=base)  # fmt: skip
            return receipt.model_copy(update={"resumed": True})
    return await _compact_and_clear(store, record, subject, resumed=True)


async def _erase(
    store: EntityEraser,
    ontology: Ontology,
    group_id: str,
    entity: EntityNode,
    now: datetime,
    *,
    embed: Embed | None,
    record: PendingErasure | None = None,
    base: GroupVersion | None = None,
) -> ErasureReceipt:
    key = name_key(entity.name)
    mentioning = {e.uuid: e for e in await store.episodes_mentioning(group_id, entity.uuid)}
    for ep in await store.find_episodes(group_id, None, None, include_rolled_back=True):
        # Its text, or its stored record (an adopted or resolved episode may state that a
        # fact about the subject ended without naming it in its text), or what the
        # instruction guard quarantined from it (kept on the episode, so erased with it).
        if ep.uuid not in mentioning and any(
            names_subject(text, key) for text in (ep.content, ep.extraction, ep.quarantine)
            if text
        ):  # fmt: skip
            mentioning[ep.uuid] = ep
    live = [u for u, e in mentioning.items() if e.status == EpisodeStatus.ingested]
    plan, report = await plan_rollback(store, ontology, group_id, live, now, kind="erasure")
    before = await store.stats(group_id, now)
    plan.delete_episodes = sorted(mentioning)
    plan.delete_entities = [entity.uuid]
    plan.drop_mentions_from = []  # the episodes go entirely
    plan.scrub_summaries = [entity.name]
    # Summaries that name the subject or drew on its episodes go too, before compaction.
    # The turns after deleted ones lose them as their previous turn: no key keeps erased text.
    plan.rekey = await rekeys(store, group_id, mentioning)
    plan.delete_communities = sorted(
        c.node.uuid for c in await store.communities(group_id)
        if entity.uuid in c.members or set(c.node.episodes) & set(mentioning)
    )  # fmt: skip
    touching = {
        v.edge.uuid for v in await store.history(group_id, entity.name_key, None, None, 100_000)
    } | {v.edge.uuid for v in await store.history(group_id, None, None, entity.name_key, 100_000)}
    deleted_versions = len(set(plan.delete_edges) | touching)
    if plan.audit is not None:
        plan.audit.detail = json.dumps(
            {"episodes_deleted": len(mentioning), "fact_versions_deleted": deleted_versions}
        )
    if embed is not None:
        await embed(plan.new_edges, plan.rekey)
    plan.base = base
    if record is None:
        uuid = new_uuid()
        record = PendingErasure(
            uuid=uuid, group_id=group_id, kind="entity", created_at=now,
            entity_uuid=entity.uuid, subject_hash=subject_hash(uuid, key),
        )  # fmt: skip
    # Durable before anything is deleted; the counts as planned, made exact after the delete.
    record = record.model_copy(update={
        "episodes_deleted": len(mentioning), "entities_deleted": 1,
        "fact_versions_deleted": deleted_versions, "other_facts_recomputed": len(report.restored),
        "communities_deleted": len(plan.delete_communities),
    })  # fmt: skip
    await store.record_erasure(record)
    await store.rewrite(plan)
    after = await store.stats(group_id, now)
    record = record.model_copy(update={
        "deleted": True, "episodes_deleted": before.episodes - after.episodes,
        "entities_deleted": before.entities - after.entities,
    })  # fmt: skip
    await store.record_erasure(record)
    return await _compact_and_clear(store, record, entity.name, resumed=False)
