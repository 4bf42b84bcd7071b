"""Community (re)builds: the operation above kg.ingest.communities (which is pure).

Label propagation over the facts true now, fingerprinted clusters, one summary call per
changed community; a rebuild is planned from reads and written at the group's version like
any write (kg.versioned), so a writer that cuts in only costs a re-plan, never a summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from kg.errors import InputError
from kg.ingest.communities import MAX_ITERATIONS, community_nodes, plan_rebuild, summarize
from kg.ingest.communities import clusters as community_clusters
from kg.ingest.llm import StructuredLLM
from kg.ingest.structured import new_uuid
from kg.schemas.plan import GroupVersion
from kg.schemas.store import FactQuery, GraphStore
from kg.times import TransactionClock
from kg.vectors import EPISODE_EMBED_CHARS, Vectors
from kg.versioned import retrying

COMMUNITY_MAX_FACTS = 100_000  # the most one fact query returns: more fails, never truncates


class CommunityReport(BaseModel):
    """What a community (re)build did, and what it cost."""

    group_id: str
    communities: int = Field(description="Communities after the build.")
    kept: int = Field(description="Unchanged clusters whose summary was reused.")
    summarized: int
    deleted: int
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: list[str] = Field(
        default_factory=list, description="Summary calls that failed (extractive fallback)."
    )


async def rebuild_communities(
    store: GraphStore,
    clock: TransactionClock,
    llm: StructuredLLM | None,
    vectors: Vectors,
    group_id: str,
    *,
    removed: Sequence[str] = (),
    max_iterations: int = MAX_ITERATIONS,
) -> CommunityReport:
    """Cluster the facts true now and summarise each changed community (with the LLM when
    there is one, else extractively), written at the group's version like any write; the
    caller holds the group's writer. `removed`: episodes a rollback or erasure took out."""
    # Summaries by cluster fingerprint, kept across attempts: a conflict re-plans the
    # clusters but asks the LLM again only about clusters it has not summarised yet.
    done: dict[str, tuple[Any, str]] = {}
    calls: list[Any] = []
    errors: list[str] = []

    async def attempt(base: GroupVersion) -> CommunityReport:
        now = clock.now()
        existing = await store.communities(group_id)
        current = await store.facts(
            FactQuery(group_id=group_id, valid_at=now, known_at=now, limit=COMMUNITY_MAX_FACTS)
        )
        if len(current) >= COMMUNITY_MAX_FACTS:  # a full page: clustering it would cut a part
            raise InputError(
                f"group {group_id!r} has {COMMUNITY_MAX_FACTS} or more facts true now: too "
                "many to cluster in one pass; communities left as they were"
            )
        names = {f.edge.source_node_uuid: f.subject for f in current}
        names |= {f.edge.target_node_uuid: f.object for f in current}
        found = community_clusters(current, max_iterations)
        plan, todo = plan_rebuild(group_id, found, existing, removed_episodes=removed)
        fresh = [c for c in todo if c.fingerprint not in done]
        summaries, more, errs = await summarize(fresh, names, llm)
        done.update(zip((c.fingerprint for c in fresh), summaries, strict=True))
        calls.extend(more)
        errors.extend(errs)
        plan.create, plan.members = community_nodes(
            group_id, todo, [done[c.fingerprint] for c in todo], now, new_uuid
        )
        texts = [f"{c.name}: {c.summary}"[:EPISODE_EMBED_CHARS] for c in plan.create]
        embedded = await vectors.vectors(group_id, texts)
        for c, v in zip(plan.create, embedded or [], strict=bool(embedded)):
            c.name_embedding = v
        if await store.has_group(group_id):
            plan.base = base
            await store.write_communities(plan)
        return CommunityReport(
            group_id=group_id,
            communities=len(found),
            kept=len(found) - len(todo),
            summarized=len(todo),
            deleted=len(plan.delete),
            llm_calls=len(calls),
            prompt_tokens=sum(c.prompt_tokens for c in calls),
            completion_tokens=sum(c.completion_tokens for c in calls),
            errors=errors,
        )

    report, _ = await retrying(store, clock, group_id, attempt)
    return report
