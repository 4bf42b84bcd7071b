"""Erasure: physical deletion of a subject or a whole group. Erasure is not invalidation.

Erasing an entity removes every episode that names it (as an entity or, whole-word, in its
text), every fact version touching it, the entities nothing else refers to afterwards, and the
entity itself. Facts about *other* subjects that those episodes supported are recomputed
without them, exactly as rollback does. Then the store compacts its files (FalkorDB rewrites
the append-only file, which otherwise still holds every command ever run). The audit event
records counts only, never the subject's name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Protocol

from pydantic import BaseModel

from kg.errors import NotFoundError
from kg.ingest.names import name_key
from kg.rollback import plan_rollback
from kg.schemas.graph import EpisodeStatus, FactEdge
from kg.schemas.ontology import Ontology
from kg.schemas.plan import GroupVersion
from kg.schemas.store import EpisodeLog, FactReader, PlanWriter, StoreAdmin, Timelines


class GroupEraser(FactReader, StoreAdmin, Protocol):
    """What erasing a group uses: its counts before, the drop and the compaction."""


class EntityEraser(EpisodeLog, Timelines, FactReader, PlanWriter, StoreAdmin, Protocol):
    """What erasing a subject uses: a rollback plan (episode log, timelines), the facts and
    communities that touch it, the rewrite and the compaction."""


class ErasureReceipt(BaseModel):
    """What was removed; returned to the caller, never stored."""

    group_id: str
    subject: str | None
    episodes_deleted: int
    entities_deleted: int
    fact_versions_deleted: int
    other_facts_recomputed: int
    files_compacted: bool
    communities_deleted: int = 0


async def erase_group(store: GroupEraser, group_id: str, now: datetime) -> ErasureReceipt:
    before = await store.stats(group_id, now)
    await store.drop_group(group_id)
    await store.compact()
    return ErasureReceipt(
        group_id=group_id,
        subject=None,
        episodes_deleted=before.episodes,
        entities_deleted=before.entities,
        fact_versions_deleted=before.edge_versions,
        other_facts_recomputed=0,
        files_compacted=True,
    )


def _names_subject(text: str, name: str) -> bool:
    pattern = r"(?<!\w)" + re.escape(name) + r"(?!\w)"
    return re.search(pattern, text, re.IGNORECASE) is not None


async def erase_entity(
    store: EntityEraser,
    ontology: Ontology,
    group_id: str,
    name: str,
    now: datetime,
    *,
    embed: Callable[[list[FactEdge]], Awaitable[None]] | None = None,
    base: GroupVersion | None = None,
) -> ErasureReceipt:
    """`base`: the group version the reads began at (kg.versioned); the rewrite checks it."""
    found = await store.entities_by_key(group_id, [name_key(name)])
    if not found:
        raise NotFoundError(f"no entity named {name!r} in group {group_id!r}")
    entity = found[0]
    mentioning = {e.uuid: e for e in await store.episodes_mentioning(group_id, entity.uuid)}
    for ep in await store.find_episodes(group_id, None, None, include_rolled_back=True):
        # Its text, or its stored record (an adopted or resolved episode may state that a
        # fact about the subject ended without naming it in its text), or what the
        # instruction guard quarantined from it (kept on the episode, so erased with it).
        text = f"{ep.content}\n{ep.extraction or ''}\n{ep.quarantine or ''}"
        if ep.uuid not in mentioning and _names_subject(text, entity.name):
            mentioning[ep.uuid] = ep
    live = [u for u, e in mentioning.items() if e.status == EpisodeStatus.ingested]
    plan, report = await plan_rollback(store, ontology, group_id, live, now, kind="erasure")
    before = await store.stats(group_id, now)
    plan.delete_episodes = sorted(mentioning)
    plan.delete_entities = [entity.uuid]
    plan.drop_mentions_from = []  # the episodes go entirely
    plan.scrub_summaries = [entity.name]
    # Summaries that name the subject or drew on its episodes go too, before compaction.
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
        await embed(plan.new_edges)
    plan.base = base
    await store.rewrite(plan)
    after = await store.stats(group_id, now)
    await store.compact()
    return ErasureReceipt(
        group_id=group_id,
        subject=entity.name,
        episodes_deleted=before.episodes - after.episodes,
        entities_deleted=before.entities - after.entities,
        fact_versions_deleted=deleted_versions,
        other_facts_recomputed=len(report.restored),
        files_compacted=True,
        communities_deleted=len(plan.delete_communities),
    )
