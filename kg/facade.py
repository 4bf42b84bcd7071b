"""The public async API: `KG`.

```
async with await KG.open() as kg:                # embedded FalkorDB under KG_HOME
    await kg.add_episode(source="facts", reference_time=now, facts=[...])
    await kg.facts(subject="Alice", valid_at=march)   # what was true in March
```
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from pydantic import BaseModel, ValidationError

from ingest import content_hash, name_key, plan_structured_episode
from ingest.embeddings import Embedder
from ingest.extraction import LLM_EXTRACTOR, Guards, extract, extraction_record, vet
from ingest.llm import LLMError, StructuredLLM
from ingest.structured import episodic_node, new_uuid, plan_facts
from kg.erasure import ErasureReceipt, erase_entity, erase_group
from kg.errors import ExtractionError, InputError, validation_message
from kg.rollback import ReplayReport, RollbackReport, plan_replay, plan_rollback
from kg.store import open_store
from kg.store.embedded import Durability
from kg.times import TransactionClock
from schemas.episode import Episode, EpisodeSource
from schemas.graph import AuditEvent, EntityNode, EpisodeStatus, EpisodicNode, Fact, FactEdge
from schemas.ontology import DEFAULT_ONTOLOGY, Ontology
from schemas.plan import PlanSummary, WritePlan
from schemas.store import FactQuery, GraphStore, StoreStats
from schemas.validation import check_group_id


class EpisodeResult(BaseModel):
    episode_uuid: str
    group_id: str
    status: Literal["added", "duplicate"]
    summary: PlanSummary


class Explanation(BaseModel):
    versions: list[Fact]
    episodes: list[EpisodicNode]


class KG:
    def __init__(
        self,
        store: GraphStore,
        *,
        ontology: Ontology = DEFAULT_ONTOLOGY,
        clock: TransactionClock | None = None,
        llm: StructuredLLM | None = None,
        guards: Guards | None = None,
        context_episodes: int = 3,
        embedder: Embedder | None = None,
    ) -> None:
        self.store = store
        self.ontology = ontology
        self.clock = clock or TransactionClock()
        self.llm = llm
        self.guards = guards or Guards()
        self.context_episodes = context_episodes
        self.embedder = embedder
        self._writers: dict[str, asyncio.Lock] = {}

    @classmethod
    async def open(
        cls,
        uri: str | None = None,
        *,
        home: str | Path | None = None,
        ontology: Ontology = DEFAULT_ONTOLOGY,
        durability: Durability = "everysec",
        llm: StructuredLLM | None = None,
        guards: Guards | None = None,
        embedder: Embedder | None = None,
    ) -> KG:
        """Open a store by URI (embedded FalkorDB by default). With an `embedder`, facts and
        entity names get embeddings and the store gets vector indexes of its dimension."""
        dim = embedder.dim if embedder is not None else None
        store = await open_store(uri, home=home, durability=durability, embedding_dim=dim)
        return cls(store, ontology=ontology, llm=llm, guards=guards, embedder=embedder)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self.store.close()

    # -- writes ---------------------------------------------------------------------------

    async def add_episode(self, episode: Episode | None = None, /, **fields: Any) -> EpisodeResult:
        """Ingest one episode; re-adding the same content to the same group is a no-op."""
        if episode is None:
            try:
                episode = Episode.model_validate(fields)
            except ValidationError as exc:
                raise InputError(f"invalid episode: {validation_message(exc)}") from None
        elif fields:
            raise TypeError("pass either an Episode or keyword fields, not both")
        if episode.source is not EpisodeSource.facts and self.llm is None:
            raise InputError(
                f"{episode.source.value!r} episodes need an LLM: open kg with llm=OpenAILLM(...) "
                "(any OpenAI-compatible endpoint), or send structured 'facts' episodes"
            )
        group = episode.group_id
        async with self._writer(group):  # plans are computed from what they read
            existing = await self.store.episode_by_hash(group, content_hash(episode))
            if existing is not None and existing.status != EpisodeStatus.failed:
                return EpisodeResult(
                    episode_uuid=existing.uuid, group_id=group, status="duplicate",
                    summary=PlanSummary(),
                )  # fmt: skip
            failed = existing.uuid if existing is not None else None
            try:
                if episode.source is EpisodeSource.facts:
                    plan, summary = await plan_structured_episode(
                        episode, self.store, self.ontology, self.clock.now()
                    )
                else:
                    plan, summary = await self._plan_with_llm(episode, failed)
            except ValidationError as exc:
                raise InputError(f"invalid episode: {validation_message(exc)}") from None
            except ValueError as exc:
                raise InputError(str(exc)) from None
            plan.replaces_failed = failed
            await self._embed(plan.new_edges, plan.new_entities)
            await self.store.apply(plan)
        return EpisodeResult(
            episode_uuid=plan.episode.uuid, group_id=group, status="added", summary=summary
        )

    async def rollback(
        self, episode_ids: str | list[str], *, group_id: str = "default", apply: bool = False
    ) -> RollbackReport:
        """Plan (and with `apply=True` carry out, atomically) undoing episodes; see kg.rollback."""
        ids = [episode_ids] if isinstance(episode_ids, str) else list(episode_ids)
        if not ids:
            raise InputError("rollback needs at least one episode id")
        self._check_group(group_id)
        async with self._writer(group_id):
            plan, report = await plan_rollback(
                self.store, self.ontology, group_id, ids, self.clock.now()
            )
            if apply and not report.noop:
                await self._embed(plan.new_edges)
                await self.store.rewrite(plan)
                report.applied = True
        return report

    async def rollback_source(
        self,
        source_description: str,
        *,
        since: datetime | None = None,
        group_id: str = "default",
        apply: bool = False,
    ) -> RollbackReport:
        """Undo every ingested episode from one source (e.g. a web page), optionally since T."""
        self._check_group(group_id)
        if since is not None and since.tzinfo is None:
            raise InputError("since: naive datetime; give it a timezone")
        episodes = await self.store.find_episodes(group_id, source_description, since)
        if not episodes:
            return RollbackReport(group_id=group_id, episodes=[])
        return await self.rollback([e.uuid for e in episodes], group_id=group_id, apply=apply)

    async def replay(self, *, group_id: str = "default", apply: bool = False) -> ReplayReport:
        """Rebuild the group from its episode log (e.g. after an ontology change) and compare;
        with `apply=True`, replace the live timelines with the rebuilt ones, atomically."""
        self._check_group(group_id)
        async with self._writer(group_id):
            plan, report = await plan_replay(self.store, self.ontology, group_id)
            if apply and not report.identical:
                await self._embed(plan.new_edges)
                await self.store.rewrite(plan)
                report.applied = True
        return report

    async def why(self, fact_id: str, *, group_id: str = "default") -> Explanation:
        """Every version of a fact and the episodes that created, reinforced and closed it."""
        self._check_group(group_id)
        versions = await self.store.fact_versions(group_id, fact_id)
        if not versions:
            raise InputError(f"no fact or fact version {fact_id!r} in group {group_id!r}")
        ids = {ep for v in versions for ep in v.edge.episodes}
        ids |= {v.edge.invalidated_by for v in versions if v.edge.invalidated_by}
        episodes = await self.store.episodes(group_id, sorted(ids))
        return Explanation(versions=versions, episodes=episodes)

    async def log(
        self, *, group_id: str = "default", limit: int = 100, closures: bool = True
    ) -> list[AuditEvent]:
        """Rollbacks, erasures and (derived from the versions themselves) closures, newest first."""
        self._check_group(group_id)
        events = await self.store.audit_log(group_id, limit)
        if closures:
            for f in await self.store.closures(group_id, limit):
                e = f.edge
                until = e.invalid_at.isoformat() if e.invalid_at else "?"
                events.append(AuditEvent(
                    uuid=e.uuid, group_id=group_id, kind="closure", created_at=e.created_at,
                    episodes=[e.invalidated_by or ""],
                    detail=f"{f.subject} {f.predicate} {f.object}: true until {until}",
                ))  # fmt: skip
        return sorted(events, key=lambda ev: ev.created_at, reverse=True)[:limit]

    async def erase_entity(self, name: str, *, group_id: str = "default") -> ErasureReceipt:
        """Physically delete a subject: its episodes, facts, entity, and their traces on disk."""
        self._check_group(group_id)
        async with self._writer(group_id):
            return await erase_entity(
                self.store, self.ontology, group_id, name, self.clock.now(), embed=self._embed
            )

    async def erase_group(self, group_id: str) -> ErasureReceipt:
        """Physically delete a whole group, and compact the store's files."""
        self._check_group(group_id)
        async with self._writer(group_id):
            return await erase_group(self.store, group_id, self.clock.now())

    async def _embed(self, edges: list[FactEdge], entities: list[EntityNode] | None = None) -> None:
        """Fill in missing embeddings, one batched call (rewritten versions included)."""
        if self.embedder is None:
            return
        todo_edges = [e for e in edges if e.fact_embedding is None]
        todo_entities = [n for n in entities or [] if n.name_embedding is None]
        texts = list(dict.fromkeys([e.fact for e in todo_edges] + [n.name for n in todo_entities]))
        if not texts:
            return
        vectors = dict(zip(texts, await self.embedder.embed(texts), strict=True))
        for e in todo_edges:
            e.fact_embedding = vectors[e.fact]
        for n in todo_entities:
            n.name_embedding = vectors[n.name]

    def _writer(self, group_id: str) -> asyncio.Lock:
        """One writer per group in this process."""
        return self._writers.setdefault(group_id, asyncio.Lock())

    @staticmethod
    def _check_group(group_id: str) -> None:
        try:
            check_group_id(group_id)
        except ValueError as exc:
            raise InputError(str(exc)) from None

    async def _plan_with_llm(
        self, episode: Episode, failed: str | None
    ) -> tuple[WritePlan, PlanSummary]:
        assert self.llm is not None
        context = await self.store.recent_episodes(episode.group_id, self.context_episodes)
        try:
            extraction, calls = await extract(self.llm, episode, self.ontology, context)
        except LLMError as exc:
            # Record the attempt (retryable: re-adding the episode tries again), write no facts.
            node = episodic_node(episode, uuid=new_uuid(), now=self.clock.now(),
                                 extractor=LLM_EXTRACTOR)  # fmt: skip
            node.status, node.error = EpisodeStatus.failed, str(exc)
            await self.store.apply(
                WritePlan(group_id=episode.group_id, episode=node, replaces_failed=failed)
            )
            raise ExtractionError(f"extraction failed, episode recorded as failed: {exc}") from exc
        facts, drops = vet(extraction, episode, self.ontology, self.guards)
        now = self.clock.now()
        node = episodic_node(episode, uuid=new_uuid(), now=now, extractor=LLM_EXTRACTOR)
        node.extraction = extraction_record(facts)
        plan, summary = await plan_facts(node, facts, self.store, self.ontology, now)
        summary.facts_dropped = {k: v for k, v in drops.model_dump().items() if v}
        summary.llm_calls = len(calls)
        summary.prompt_tokens = sum(c.prompt_tokens for c in calls)
        summary.completion_tokens = sum(c.completion_tokens for c in calls)
        return plan, summary

    # -- reads ----------------------------------------------------------------------------

    def _predicate(self, predicate: str | None) -> str | None:
        if predicate is None:
            return None
        try:
            return self.ontology.resolve_predicate(predicate).name
        except ValueError as exc:
            raise InputError(str(exc)) from None

    async def facts(
        self,
        *,
        group_id: str = "default",
        subject: str | None = None,
        predicate: str | None = None,
        object: str | None = None,
        valid_at: datetime | None = None,
        known_at: datetime | None = None,
        include_contested: bool = False,
        limit: int = 1000,
    ) -> list[Fact]:
        """What was true at `valid_at` (default now), as kg knew it at `known_at` (default now)."""
        now = self.clock.now()
        try:
            query = FactQuery(
                group_id=group_id,
                valid_at=valid_at or now,
                known_at=known_at or now,
                subject_key=name_key(subject) if subject is not None else None,
                predicate=self._predicate(predicate),
                object_key=name_key(object) if object is not None else None,
                include_contested=include_contested,
                limit=limit,
            )
        except ValidationError as exc:
            raise InputError(f"invalid query: {validation_message(exc)}") from None
        return await self.store.facts(query)

    async def history(
        self,
        *,
        group_id: str = "default",
        subject: str | None = None,
        predicate: str | None = None,
        object: str | None = None,
        limit: int = 1000,
    ) -> list[Fact]:
        """Every version of the matching facts, retired ones included, with provenance."""
        self._check_group(group_id)
        return await self.store.history(
            group_id,
            name_key(subject) if subject is not None else None,
            self._predicate(predicate),
            name_key(object) if object is not None else None,
            limit,
        )

    async def stats(self, group_id: str = "default") -> StoreStats:
        self._check_group(group_id)
        return await self.store.stats(group_id, self.clock.now())

    async def groups(self) -> list[str]:
        return await self.store.groups()
