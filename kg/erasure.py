"""Erasure: physical deletion of a subject or a whole group. Erasure is not invalidation.

Erasing a subject removes every episode that names it: as an entity, or in its text, name,
stored extraction, quarantine or queue record, spelt any way kg.redaction reads as its name
(full-width, any whitespace, case, hyphenated or joined). Episodes still in the background
queue (queued, leased, failed) are deleted too, and a worker holding one writes nothing
afterwards (its lease guard finds no episode). Every fact version touching the subject goes,
with the entity, its hyphenated or joined spellings, and the entities nothing else refers to
afterwards. Facts about *other* subjects that those episodes supported are recomputed without
them, exactly as rollback does: some go. A dry run (`dry_run`) lists them, and every receipt
does; `keep_others` keeps them instead, re-asserted from a redacted copy of each episode (the
subject's name cut out, the copy's name saying what it is and what it copies). Then the store
compacts its files (FalkorDB rewrites the append-only file, which otherwise still holds every
command ever run, after emptying its query logs); a store that cannot do that online (Neo4j)
says what remains on disk, and the receipt carries it. The audit event records counts only,
never the subject's name.

An erasure survives a crash: before anything is deleted, a `PendingErasure` record is written
(no erased text: the entity's uuid, the uuids of the episodes to delete, and a salted hash of
its name key), and it is removed only after the compaction. A record left by a crash is
finished on the next open (`KG.open`) or when the erasure is run again, whichever comes first;
the receipt says when compaction ended. Finished on open, without the name, it keeps no
redacted copies: erasing comes first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from pydantic import BaseModel, Field

from kg.errors import NotFoundError
from kg.ingest.extraction import extraction_record
from kg.ingest.names import name_key
from kg.ingest.structured import fact_text, new_uuid, stored_facts
from kg.redaction import names_subject, redact, variant_keys
from kg.rollback import UNWRITTEN, FactChange, plan_rollback
from kg.schemas.episode import EpisodeSource, StructuredFact
from kg.schemas.graph import EntityNode, EpisodeStatus, EpisodicNode, FactEdge
from kg.schemas.ontology import Ontology
from kg.schemas.plan import EpisodeKey, GroupVersion, RewritePlan
from kg.schemas.store import (
    EpisodeLog,
    ErasureLog,
    FactReader,
    PendingErasure,
    PlanWriter,
    StoreAdmin,
    Timelines,
)
from kg.search_keys import compose, keyed, rekeys

# Fills in the embeddings of rewritten fact versions and rebuilt episode keys.
Embed = Callable[[list[FactEdge], list[EpisodeKey]], Awaitable[None]]


class GroupEraser(FactReader, StoreAdmin, ErasureLog, Protocol):
    """What erasing a group uses: its counts before, the record, the drop and compaction."""


class EntityEraser(EpisodeLog, Timelines, FactReader, PlanWriter, StoreAdmin, ErasureLog, Protocol):
    """What erasing a subject uses: a rollback plan (episode log, timelines), the facts and
    communities that touch it, the record, the rewrite and the compaction."""

    async def entities_by_uuid(self, group_id: str, uuids: list[str]) -> list[EntityNode]: ...


class ErasureReceipt(BaseModel):
    """What was removed (a dry run: would be); returned to the caller, never stored."""

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
    dry_run: bool = Field(default=False, description="Nothing was erased: what would be.")
    queue_records_deleted: int = Field(
        default=0,
        description="Of the episodes deleted, those still in the background queue "
        "(queued, leased or failed): never written, and never will be.",
    )
    other_facts_removed: list[FactChange] = Field(
        default_factory=list,
        description="Facts about other subjects, believed now, that go "
        "because they came only from the erased episodes (keep them with keep_others).",
    )
    other_facts_kept: list[FactChange] = Field(
        default_factory=list,
        description="keep_others: those facts, re-asserted from a redacted copy of their episode.",
    )
    redacted_copies: int = Field(
        default=0, description="keep_others: redacted episode copies written."
    )


def subject_hash(record_uuid: str, key: str) -> str:
    """What a pending record keeps of the name: a re-run can match it, a reader learns
    nothing short of guessing the name (salted, so not across records)."""
    return hashlib.sha256(f"{record_uuid}\0{key}".encode()).hexdigest()


def _receipt(
    record: PendingErasure,
    subject: str | None,
    compacted_at: datetime | None,
    resumed: bool,
    residue: str | None,
) -> ErasureReceipt:
    return ErasureReceipt(
        group_id=record.group_id,
        subject=subject,
        episodes_deleted=record.episodes_deleted,
        entities_deleted=record.entities_deleted,
        fact_versions_deleted=record.fact_versions_deleted,
        other_facts_recomputed=record.other_facts_recomputed,
        files_compacted=residue is None,
        communities_deleted=record.communities_deleted,
        compacted_at=compacted_at,
        resumed=resumed,
        residue=residue,
        queue_records_deleted=record.queue_records_deleted,
        redacted_copies=record.redacted_copies,
    )


async def _compact_and_clear(
    store: GroupEraser, record: PendingErasure, subject: str | None, resumed: bool
) -> ErasureReceipt:
    residue = await store.compact()
    compacted_at = datetime.now(UTC) if residue is None else None
    await store.clear_erasure(record.uuid)
    return _receipt(record, subject, compacted_at, resumed, residue)


async def erase_group(store: GroupEraser, group_id: str, now: datetime) -> ErasureReceipt:
    pending = [
        p for p in await store.pending_erasures() if p.group_id == group_id and p.kind == "group"
    ]
    if pending:
        record = pending[0]
    else:
        before = await store.stats(group_id, now)
        record = PendingErasure(
            uuid=new_uuid(),
            group_id=group_id,
            kind="group",
            created_at=now,
            deleted=True,
            episodes_deleted=before.episodes,
            entities_deleted=before.entities,
            fact_versions_deleted=before.edge_versions,
        )
        await store.record_erasure(record)
    await store.drop_group(group_id)
    return await _compact_and_clear(store, record, None, resumed=bool(pending))


async def erase_entity(
    store: EntityEraser,
    ontology: Ontology,
    group_id: str,
    name: str,
    now: datetime,
    *,
    embed: Embed | None = None,
    base: GroupVersion | None = None,
    dry_run: bool = False,
    keep_others: bool = False,
) -> ErasureReceipt:
    """`base`: the group version the reads began at (kg.versioned); the rewrite checks it.
    `dry_run`: plan only, and say what would go; `keep_others`: see the module docstring."""
    key = name_key(name)
    found = await store.entities_by_key(group_id, variant_keys(key))
    found.sort(key=lambda e: (e.name_key != key, e.name_key))  # the exact spelling first
    record = None
    if not dry_run and not any(e.name_key == key for e in found):
        for pending in await store.pending_erasures():  # a crash interrupted this erasure
            if (pending.group_id, pending.kind) == (group_id, "entity") and (
                pending.subject_hash == subject_hash(pending.uuid, key)
            ):
                if pending.deleted:
                    return await _compact_and_clear(store, pending, name, resumed=True)
                record = pending
    target = _Target(key=key, entities=found, known=record.episode_uuids if record else [])
    if not await target.collect(store, group_id) and record is None:
        raise NotFoundError(f"no entity named {name!r} in group {group_id!r}")
    subject = found[0].name if found and found[0].name_key == key else name
    receipt = await _erase(
        store,
        ontology,
        group_id,
        target,
        subject,
        now,
        embed=embed,
        record=record,
        base=base,
        dry_run=dry_run,
        keep_others=keep_others,
    )
    return receipt.model_copy(update={"resumed": True}) if record is not None else receipt


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
    """Carry a recorded erasure to its end: drop the group again (idempotent), or delete
    what is still there of the subject (the crash came before the delete), then compact.
    Without the name, what the record lists is all it can find: the entity and the
    episodes, by uuid."""
    if record.kind == "group":
        await store.drop_group(record.group_id)
    elif not record.deleted:
        entities = await store.entities_by_uuid(record.group_id, [record.entity_uuid or ""])
        target = _Target(key=None, entities=entities, known=record.episode_uuids)
        if await target.collect(store, record.group_id):
            receipt = await _erase(
                store,
                ontology,
                record.group_id,
                target,
                subject,
                now,
                embed=embed,
                record=record,
                base=base,
            )
            return receipt.model_copy(update={"resumed": True})
    return await _compact_and_clear(store, record, subject, resumed=True)


@dataclass
class _Target:
    """What an erasure deletes: the subject's entities and every episode naming it."""

    key: str | None  # None: finishing a record without the name (uuids only)
    entities: list[EntityNode]
    known: list[str] = field(default_factory=list)  # episode uuids a record planned
    episodes: dict[str, EpisodicNode] = field(default_factory=dict)

    async def collect(self, store: EntityEraser, group_id: str) -> bool:
        """Find the episodes; whether there is anything to erase."""
        for e in self.entities:
            mentioning = await store.episodes_mentioning(group_id, e.uuid)
            self.episodes |= {ep.uuid: ep for ep in mentioning}
        self.episodes |= {ep.uuid: ep for ep in await store.episodes(group_id, self.known)}
        if self.key is not None:
            for ep in await store.find_episodes(group_id, None, None, include_rolled_back=True):
                # Its text, or its stored record (an adopted or resolved episode may state
                # that a fact about the subject ended without naming it in its text), or
                # what the guard quarantined from it, or what the queue kept of it.
                if ep.uuid not in self.episodes and any(
                    names_subject(text, self.key)
                    for text in (
                        ep.content,
                        ep.extraction,
                        ep.quarantine,
                        ep.staged,
                        ep.error,
                        ep.name,
                    )
                    if text
                ):
                    self.episodes[ep.uuid] = ep
        return bool(self.entities or self.episodes)

    def touches(self, subject: str, obj: str) -> bool:
        """Whether a fact between these two names is about the subject."""
        names = {e.name for e in self.entities}
        if subject in names or obj in names:
            return True
        return self.key is not None and (
            names_subject(subject, self.key) or names_subject(obj, self.key)
        )


async def _erase(
    store: EntityEraser,
    ontology: Ontology,
    group_id: str,
    target: _Target,
    subject: str | None,
    now: datetime,
    *,
    embed: Embed | None,
    record: PendingErasure | None = None,
    base: GroupVersion | None = None,
    dry_run: bool = False,
    keep_others: bool = False,
) -> ErasureReceipt:
    mentioning = target.episodes
    live = [u for u, e in mentioning.items() if e.status == EpisodeStatus.ingested]
    plan, report = await plan_rollback(store, ontology, group_id, live, now, kind="erasure")
    others = [c for c in report.removed if not target.touches(c.subject, c.object)]
    kept: list[FactChange] = []
    copies: list[EpisodicNode] = []
    if keep_others and others and target.key is not None:
        copies = [
            c
            for ep in sorted((mentioning[u] for u in live), key=lambda e: e.uuid)
            if (c := _redacted_copy(ep, target, now)) is not None
        ]
        if copies:
            plan, report = await plan_rollback(
                store, ontology, group_id, live, now, kind="erasure", extra=copies
            )
            still = [c for c in report.removed if not target.touches(c.subject, c.object)]
            kept, others = [c for c in others if c not in still], still
    queued = sum(1 for e in mentioning.values() if e.status in UNWRITTEN)
    deleted_versions = await _widen(store, plan, group_id, target, subject, copies)
    if plan.audit is not None:
        plan.audit.detail = json.dumps(
            {
                "episodes_deleted": len(mentioning),
                "fact_versions_deleted": deleted_versions,
                "queue_records_deleted": queued,
                "redacted_copies": len(copies),
            }
        )
    counts = {
        "episodes_deleted": len(mentioning),
        "entities_deleted": len(target.entities),
        "fact_versions_deleted": deleted_versions,
        "other_facts_recomputed": len(report.restored),
        "communities_deleted": len(plan.delete_communities),
        "queue_records_deleted": queued,
        "redacted_copies": len(copies),
    }
    if dry_run:
        return ErasureReceipt.model_validate(
            {
                "group_id": group_id,
                "subject": subject,
                "files_compacted": False,
                "dry_run": True,
                "other_facts_removed": others,
                "other_facts_kept": kept,
                **counts,
            }
        )
    if embed is not None:
        await embed(plan.new_edges, plan.rekey)
    plan.base = base
    receipt = await _carry_out(store, plan, group_id, target, subject, now, record, counts, copies)
    return receipt.model_copy(update={"other_facts_removed": others, "other_facts_kept": kept})


async def _widen(
    store: EntityEraser,
    plan: RewritePlan,
    group_id: str,
    target: _Target,
    subject: str | None,
    copies: list[EpisodicNode],
) -> int:
    """The rollback's plan widened to everything the subject reached: its episodes, entities,
    summaries and communities; the number of fact versions that go."""
    mentioning = target.episodes
    plan.delete_episodes = sorted(mentioning)
    plan.delete_entities = [e.uuid for e in target.entities]
    plan.drop_mentions_from = []  # the episodes go entirely
    plan.scrub_summaries = sorted({e.name for e in target.entities} | {subject or ""} - {""})
    # Summaries that name the subject or drew on its episodes go too, before compaction.
    # The turns after deleted ones lose them as their previous turn: no key keeps erased text.
    plan.rekey = await rekeys(store, group_id, mentioning)
    await _add_copies(store, plan, copies)
    erased = {e.uuid for e in target.entities}
    plan.delete_communities = sorted(
        c.node.uuid
        for c in await store.communities(group_id)
        if erased & set(c.members) or set(c.node.episodes) & set(mentioning)
    )
    touching: set[str] = set()
    for e in target.entities:
        for s_key, o_key in ((e.name_key, None), (None, e.name_key)):
            history = await store.history(group_id, s_key, None, o_key, 100_000)
            touching |= {v.edge.uuid for v in history}
    return len(set(plan.delete_edges) | touching)


async def _carry_out(
    store: EntityEraser,
    plan: RewritePlan,
    group_id: str,
    target: _Target,
    subject: str | None,
    now: datetime,
    record: PendingErasure | None,
    counts: dict[str, int],
    copies: list[EpisodicNode],
) -> ErasureReceipt:
    """The erasure done: recorded durably first, then written, counted and compacted."""
    mentioning = target.episodes
    before = await store.stats(group_id, now)
    if record is None:
        uuid = new_uuid()
        first = target.entities[0].uuid if target.entities else None
        record = PendingErasure(
            uuid=uuid,
            group_id=group_id,
            kind="entity",
            created_at=now,
            entity_uuid=first,
            subject_hash=subject_hash(uuid, target.key or ""),
        )
    # Durable before anything is deleted; the counts as planned, made exact after the delete.
    record = record.model_copy(update={**counts, "episode_uuids": sorted(mentioning)})
    await store.record_erasure(record)
    await store.rewrite(plan)
    after = await store.stats(group_id, now)
    record = record.model_copy(
        update={
            "deleted": True,
            "episodes_deleted": before.episodes - after.episodes + len(copies),
            "entities_deleted": before.entities - after.entities,
            "episode_uuids": [],
        }
    )
    await store.record_erasure(record)
    return await _compact_and_clear(store, record, subject, resumed=False)


def _redacted_copy(ep: EpisodicNode, target: _Target, now: datetime) -> EpisodicNode | None:
    """The episode with the subject cut out: the facts it stated about others (their text
    redacted), and its content, name and source redacted (a message loses the subject's own
    lines whole). None when nothing of it is about others, or when a redaction would still
    name the subject."""
    key = target.key
    assert key is not None
    try:
        facts = [f for f in stored_facts(ep) if not target.touches(f.subject, f.object)]
    except ValueError:
        return None  # no record of its facts: nothing to re-assert
    kept: list[StructuredFact] = []
    for f in facts:
        said = redact(f.fact, key) if f.fact else None
        if f.fact and said is None:
            return None
        kept.append(f.model_copy(update={"fact": said}) if f.fact else f)
    if not kept:
        return None
    structured = ep.source is EpisodeSource.facts
    text = ep.content
    if ep.source is EpisodeSource.message:  # what the subject said goes whole, not just its name
        text = "\n".join(
            line for line in text.splitlines() if not names_subject(line.partition(":")[0], key)
        )
    content = (
        extraction_record(kept)
        if structured
        else redact(text, key, as_json=ep.source is EpisodeSource.json)
    )
    label = redact(ep.name, key) if ep.name else ""
    source = redact(ep.source_description, key) if ep.source_description else ""
    if content is None or label is None or source is None:
        return None
    copy_name = f"redacted copy of episode {ep.uuid} (an erasure on {now:%Y-%m-%d} cut a name)"
    node = EpisodicNode(
        uuid=new_uuid(),
        group_id=ep.group_id,
        name=f"{copy_name}: {label}" if label else copy_name,
        source=ep.source,
        source_description=source,
        content=content,
        content_hash=hashlib.sha256(f"redacted\0{ep.uuid}\0{content}".encode()).hexdigest(),
        valid_at=ep.valid_at,
        created_at=ep.created_at,
        channel=ep.channel,
        trust=ep.trust,
        extractor=ep.extractor,
        extraction=None if structured else extraction_record(kept),
        queued_at=ep.queued_at,
    )
    if keyed(node):
        node.search_key = compose(content, [fact_text(f) for f in kept])
    return node


async def _add_copies(store: EntityEraser, plan: RewritePlan, copies: list[EpisodicNode]) -> None:
    """The copies go in with the rewrite, each mentioning the entities of its facts, and
    keyed (their keys embedded with the rest)."""
    if not copies:
        return
    plan.new_episodes = copies
    names = {name_key(n) for c in copies for f in stored_facts(c) for n in (f.subject, f.object)}
    uuids = {e.name_key: e.uuid for e in await store.entities_by_key(plan.group_id, sorted(names))}
    plan.new_mentions = {
        c.uuid: sorted(
            {
                uuids[k]
                for f in stored_facts(c)
                for k in (name_key(f.subject), name_key(f.object))
                if k in uuids
            }
        )
        for c in copies
    }
    plan.rekey += [
        EpisodeKey(uuid=c.uuid, search_key=c.search_key) for c in copies if c.search_key is not None
    ]
