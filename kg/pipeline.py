"""The write path as one object: episodes from their checks to the atomic write.

`KG.add_episode(s)` and the queue's `Worker` drive a `Pipeline` as siblings, through its
public stages:

```
check -> add | add_batch | add_many         written now (read, plan, write; again on conflict)
      -> enqueue                            stored as queued, searchable; then a worker:
         extraction_context -> extract -> resolution_question -> complete (under its lease)
```

It owns the store, the LLM, the embedder (through `Vectors`), the ontology, the clock, the
guards and this process's writer state: one writer per group (`writer`), the version its
last write made current (planned at without a read, kg.versioned) and the planning read
that rode in that write (`Ahead`). How an episode becomes a plan is its planner's business
(kg.planners): structured, extracted or raw.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, Field

from kg.errors import (
    ExtractionError,
    InputError,
    LLMRequiredError,
    StoreError,
    WriteConflictError,
    check_group,
)
from kg.ingest import content_hash
from kg.ingest.communities import plan_joins
from kg.ingest.extraction import Guards, extract, vet
from kg.ingest.llm import StructuredLLM
from kg.ingest.resolution import Answer, Question, question
from kg.ingest.structured import episodic_node, new_uuid, planning_names
from kg.planners import (
    LLM_CALLS_PER_EPISODE,
    Ahead,
    Extracted,
    ExtractedPlanner,
    Planner,
    Tools,
    first_episode,
    plan_structured,
    planner_for,
    record,
)
from kg.schemas.embedder import Embedder
from kg.schemas.episode import Episode
from kg.schemas.graph import EpisodeStatus, EpisodicNode
from kg.schemas.ontology import Ontology
from kg.schemas.plan import GroupVersion, PlanSummary, WritePlan
from kg.schemas.store import GraphStore, PlanningNames
from kg.search_keys import key_for
from kg.times import TransactionClock
from kg.tracing import Attributes, traced
from kg.vectors import Vectors
from kg.versioned import retrying

# add_episodes: consecutive structured episodes of a group planned in order, written together
# (a bigger batch spreads each write's fixed cost further, and re-plans more when another
# writer of the group cuts in)
BULK_BATCH = 200


class EpisodeResult(BaseModel):
    """What `add_episode` did: `added` (written), `duplicate` (the group has it: content hash
    or idempotency key), or `queued` (`wait=False`: stored and searchable, extraction to come
    from a worker; see kg.queue)."""

    episode_uuid: str
    group_id: str
    status: Literal["added", "duplicate", "queued"]
    summary: PlanSummary
    attempts: int = Field(
        default=1,
        description="Plans it took: more than one when another writer changed the group "
        "between this one's reads and its write (see kg.versioned).",
    )


class BulkResult(BaseModel):
    """What `add_episodes` did: one result an episode added or already present, in the
    order given, and the episodes whose extraction failed (recorded; a re-run retries)."""

    results: list[EpisodeResult]
    failed: list[str] = Field(default_factory=list, description="'episodes[i]: error' each.")

    def _sum(self, field: str) -> int:
        return sum(getattr(r.summary, field) for r in self.results)

    @property
    def added(self) -> int:
        return sum(r.status == "added" for r in self.results)

    @property
    def duplicate(self) -> int:
        return sum(r.status == "duplicate" for r in self.results)

    @property
    def queued(self) -> int:
        return sum(r.status == "queued" for r in self.results)

    @property
    def facts_added(self) -> int:
        return self._sum("facts_added")

    @property
    def facts_closed(self) -> int:
        return self._sum("facts_closed")

    @property
    def facts_contested(self) -> int:
        return self._sum("facts_contested")

    @property
    def llm_calls(self) -> int:
        return self._sum("llm_calls")

    @property
    def tokens(self) -> int:
        return self._sum("prompt_tokens") + self._sum("completion_tokens")


def queued_episode(node: EpisodicNode) -> Episode:
    """The episode a queued node holds, as it was given (structured facts from its content)."""
    return planner_for(node.source).queued_episode(node)


def _duplicate(existing: EpisodicNode, group: str) -> EpisodeResult:
    return EpisodeResult(
        episode_uuid=existing.uuid, group_id=group, status="duplicate", summary=PlanSummary()
    )


def _added(plan: WritePlan, group: str, summary: PlanSummary) -> EpisodeResult:
    return EpisodeResult(
        episode_uuid=plan.episode.uuid, group_id=group, status="added", summary=summary
    )


class _OneByOne(Exception):
    """A batch that must go one episode at a time (see `Pipeline.add_batch`)."""


def _batches(indexes: list[int], episodes: list[Episode]) -> list[list[int]]:
    """A group's episodes (in order) cut into what `add_episodes` writes together: runs of
    consecutive episodes whose planner batches (structured), BULK_BATCH at most, and any
    other episode alone."""
    out: list[list[int]] = []
    for i in indexes:
        batches = planner_for(episodes[i].source).batches
        last = out[-1] if out else None
        if (
            batches
            and last is not None
            and len(last) < BULK_BATCH
            and planner_for(episodes[last[0]].source).batches
        ):
            last.append(i)
        else:
            out.append([i])
    return out


@dataclass
class _Run:
    """One `add_many`: the checked episodes, their results so far and its progress."""

    episodes: list[Episode]
    extract: bool
    on_progress: Callable[[int, int], None] | None
    digests: dict[int, str] = field(default_factory=dict)  # structured ones' content hashes
    results: dict[int, EpisodeResult] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    done: int = 0

    def progressed(self, batch: list[int]) -> None:
        for _ in batch:
            self.done += 1
            if self.on_progress is not None:
                self.on_progress(self.done, len(self.episodes))


class Pipeline:
    def __init__(
        self,
        store: GraphStore,
        *,
        ontology: Ontology,
        clock: TransactionClock,
        llm: StructuredLLM | None,
        guards: Guards,
        context_episodes: int,
        embedder: Embedder | None,
    ) -> None:
        self.store = store
        self.ontology = ontology
        self.clock = clock
        self.llm = llm
        self.guards = guards
        self.context_episodes = context_episodes
        self.vectors = Vectors(store, embedder)
        self.tools = Tools(
            store, ontology, clock, llm, guards, context_episodes, self.vectors, Ahead(store)
        )
        self._writers: dict[str, asyncio.Lock] = {}
        # Per group, the version this process's last episode write made current: the next
        # episode plans at it without reading it (a stale one only costs a re-plan; see
        # kg.versioned.retrying).
        self._written: dict[str, GroupVersion] = {}
        # Called with the group after each enqueue: a worker in this process wakes at once.
        self.enqueue_listeners: list[Callable[[str], None]] = []

    @property
    def embedder(self) -> Embedder | None:
        return self.vectors.embedder

    def writer(self, group_id: str) -> asyncio.Lock:
        """One writer per group in this process (episodes, rollbacks, erasures, imports...)."""
        return self._writers.setdefault(group_id, asyncio.Lock())

    # -- stages ---------------------------------------------------------------------------

    def check(self, episode: Episode, *, extract: bool = True, queued: bool = False) -> None:
        """Refuse, before anything is read or written, an episode `add` could not take: a
        text episode with no LLM to extract it (`LLMRequiredError`; a queued one needs the
        LLM in the worker instead), or structured facts the ontology refuses (`InputError`)."""
        planner_for(episode.source, extract=extract).check(self.tools, episode, queued=queued)

    def queues(self, episode: Episode, *, extract: bool = True) -> bool:
        """Whether `wait=False` queues it (a text stored unextracted is written at once)."""
        return planner_for(episode.source, extract=extract).queues

    def extracts(self, node: EpisodicNode) -> bool:
        """Whether writing a queued episode needs the LLM's extraction first."""
        return planner_for(node.source).extracts

    @traced(
        "kg.ingest",
        lambda _, episode, **kw: _episode_attributes(episode, kw),
        lambda r: _result_attributes(r),
    )
    async def add(
        self, episode: Episode, *, extract: bool = True, then: PlanningNames | None = None
    ) -> EpisodeResult:
        """Plan and write one checked episode (see `check`), again if another writer changed
        the group between this one's reads and its write (see kg.versioned). `then`: the
        planning read of the group's next (structured) episode, to make in this one's write
        (see `PlanningRead.apply_many`)."""
        planner = planner_for(episode.source, extract=extract)(self.tools, episode)
        group = episode.group_id
        async with self.writer(group):  # one writer per group in this process, then versions
            (result, plan), attempts = await retrying(
                self.store,
                self.clock,
                group,
                lambda base: self._attempt(planner, base, then),
                known=self._written.pop(group, None),
            )
            if plan is not None:
                await self.join_communities(plan)
        result.attempts = attempts
        return result

    async def _attempt(
        self, planner: Planner, base: GroupVersion, then: PlanningNames | None
    ) -> tuple[EpisodeResult, WritePlan | None]:
        """One attempt: read, plan and write at `base`. The returned plan is None when no
        community join can follow (a duplicate, or a group that had no communities)."""
        group = planner.episode.group_id
        existing = await planner.read(base)
        if existing is not None and existing.status != EpisodeStatus.failed:
            self._written[group] = base  # nothing written: still the version to plan at
            return _duplicate(existing, group), None
        failed = existing.uuid if existing is not None else None
        plan, summary = await planner.plan(new_uuid(), failed, base)
        plan.replaces_failed = failed
        plan.base = base
        record(plan.episode, summary)
        if plan.episode.status is EpisodeStatus.ingested:
            plan.episode.search_key = await key_for(self.store, plan.episode)
        await self.vectors.embed(group, plan.new_edges, plan.new_entities, plan.episode)
        self._written[group] = await planner.write(plan, then)
        return _added(plan, group, summary), plan if planner.joins else None

    async def add_batch(
        self,
        episodes: list[Episode],
        names: PlanningNames,
        then: PlanningNames | None,
        digests: list[str],
    ) -> list[EpisodeResult]:
        """Checked structured episodes of one group, in order, planned together and written as
        one atomic unit (re-planned together if another writer changed the group meanwhile):
        the graph `add` one by one gives. `then`: the next batch's planning read, made in
        this one's write. A group with communities (each episode joins them), or a batch
        the store refuses, goes one by one instead: what the episodes before the one at fault
        wrote stays written, and that one's error is raised as `add` raises it. `names`:
        the batch's own planning read (`planning_names` of them all); `digests`: the
        episodes' content hashes."""
        group = episodes[0].group_id
        try:
            async with self.writer(group):
                results, attempts = await retrying(
                    self.store,
                    self.clock,
                    group,
                    lambda base: self._attempt_batch(episodes, names, base, then, digests),
                    known=self._written.pop(group, None),
                )
        except WriteConflictError:
            raise  # every plan overtaken: one by one would fare no better
        except (_OneByOne, StoreError, InputError):
            self.tools.ahead.drop(group)
            out = []
            for k, episode in enumerate(episodes):
                after = episodes[k + 1] if k + 1 < len(episodes) else None
                next_names = planning_names(after, self.ontology) if after is not None else None
                out.append(await self.add(episode, extract=True, then=next_names))
            return out
        for r in results:
            r.attempts = attempts
        return results

    async def _attempt_batch(
        self,
        episodes: list[Episode],
        names: PlanningNames,
        base: GroupVersion,
        then: PlanningNames | None,
        digests: list[str],
    ) -> list[EpisodeResult]:
        """One attempt of `add_batch`: one planning read for the whole batch (or the one
        made in the write before), each episode planned from it and from the plans before
        it (`BatchTimelines`, carried from the batch before when nothing moved the group
        since), then one write of them all at `base`."""
        group = episodes[0].group_id
        timelines = await self.tools.ahead.timelines(group, names, base)
        if timelines.communities:
            self._written[group] = base
            raise _OneByOne
        results, plans = [], []
        for episode, digest in zip(episodes, digests, strict=True):
            # Planned first (it has its content hash then); a duplicate's plan is dropped.
            plan, summary = await plan_structured(
                self.tools, episode, new_uuid(), timelines, digest
            )
            existing = first_episode(
                timelines.duplicates(plan.episode.content_hash, episode.idempotency_key)
            )
            if existing is not None and existing.status != EpisodeStatus.failed:
                results.append(_duplicate(existing, group))
                continue
            plan.replaces_failed = existing.uuid if existing is not None else None
            plan.base = base
            record(plan.episode, summary)
            await self.vectors.embed(group, plan.new_edges, plan.new_entities, plan.episode)
            timelines.commit(plan)
            plans.append(plan)
            results.append(_added(plan, group, summary))
        if not plans:
            self._written[group] = base  # nothing written: still the version to plan at
            return results
        self._written[group] = await self.tools.ahead.apply_many(plans, then, timelines)
        return results

    @traced(
        "kg.ingest.bulk",
        lambda _, episodes, **kw: _bulk_attributes(episodes, kw),
        lambda r: _bulk_result_attributes(r),
    )
    async def add_many(
        self,
        episodes: list[Episode],
        *,
        concurrency: int,
        extract: bool = True,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> BulkResult:
        """Checked episodes, each group's in reference-time order (ties in the order given)
        by one writer, up to `concurrency` groups at once; a group's consecutive structured
        episodes through `add_batch`. A text episode whose extraction fails is recorded as
        failed and counted; any other error stops the run (what is in stays in)."""
        run = _Run(episodes, extract, on_progress)
        # Each structured episode's content hash, made once: its batch's read, then its node.
        run.digests = {
            i: content_hash(ep) for i, ep in enumerate(episodes) if planner_for(ep.source).batches
        }
        by_group: dict[str, list[int]] = {}
        for i in sorted(range(len(episodes)), key=lambda i: episodes[i].reference_time):
            by_group.setdefault(episodes[i].group_id, []).append(i)
        slots = asyncio.Semaphore(concurrency)
        try:
            async with asyncio.TaskGroup() as tasks:
                for indexes in by_group.values():
                    tasks.create_task(self._add_group(run, indexes, slots))
        except BaseExceptionGroup as group:
            raise group.exceptions[0] from None  # the first error, as add_episode raises it
        return BulkResult(
            results=[run.results[i] for i in sorted(run.results)],
            failed=[f"episodes[{i}]: {run.failed[i]}" for i in sorted(run.failed)],
        )

    async def _add_group(self, run: _Run, indexes: list[int], slots: asyncio.Semaphore) -> None:
        """One group's part of `add_many`, in order."""
        batches = _batches(indexes, run.episodes)
        names: PlanningNames | None = None  # the batch's, made as the one before's `then`
        async with slots:
            for k, batch in enumerate(batches):
                first = run.episodes[batch[0]]
                after = batches[k + 1] if k + 1 < len(batches) else []
                if planner_for(first.source).batches:
                    if names is None:
                        names = self._names(run, batch)
                    then = None
                    if after and planner_for(run.episodes[after[0]].source).batches:
                        then = self._names(run, after)
                    added = await self.add_batch(
                        [run.episodes[i] for i in batch],
                        names,
                        then,
                        [run.digests[i] for i in batch],
                    )
                    run.results.update(zip(batch, added, strict=True))
                    names = then
                else:
                    try:
                        run.results[batch[0]] = await self.add(first, extract=run.extract)
                    except ExtractionError as exc:
                        run.failed[batch[0]] = str(exc)
                run.progressed(batch)

    def _names(self, run: _Run, batch: list[int]) -> PlanningNames:
        return planning_names(
            [run.episodes[i] for i in batch], self.ontology, [run.digests[i] for i in batch]
        )

    async def enqueue(
        self, episode: Episode, *, after_seconds: float | None = None
    ) -> EpisodeResult:
        """Store a checked episode as `queued`: durable, searchable, extracted later."""
        group = check_group(episode.group_id)
        now = self.clock.now()
        kind = planner_for(episode.source)
        node = episodic_node(
            episode,
            uuid=new_uuid(),
            now=now,
            content=kind.queued_content(episode),
            extractor=kind.extractor,
        )
        node.status, node.queued_at = EpisodeStatus.queued, now
        if after_seconds is not None and episode.session_id is not None:
            node.next_attempt_at = now + timedelta(seconds=after_seconds)
        node.search_key = await key_for(self.store, node)
        await self.vectors.embed(group, [], None, node)
        stored, created = await self.store.enqueue(node)
        if created and node.next_attempt_at is not None and episode.session_id is not None:
            await self.store.debounce(group, episode.session_id, node.next_attempt_at)
        if created:
            for listener in self.enqueue_listeners:
                listener(group)
        return EpisodeResult(
            episode_uuid=stored.uuid,
            group_id=group,
            status="queued" if created else "duplicate",
            summary=PlanSummary(),
        )

    async def enqueue_many(
        self,
        episodes: list[Episode],
        *,
        extract: bool,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> BulkResult:
        """Checked episodes queued in the order given (those stored unextracted: written)."""
        results = []
        for i, ep in enumerate(episodes):
            if self.queues(ep, extract=extract):
                results.append(await self.enqueue(ep))
            else:
                results.append(await self.add(ep, extract=False))
            if on_progress is not None:
                on_progress(i + 1, len(episodes))
        return BulkResult(results=results)

    async def extraction_context(self, node: EpisodicNode) -> list[EpisodicNode]:
        """The episodes before a queued one in the group's order, as a one-by-one ingest
        would give its extraction call."""
        return await self.store.context_before(node.group_id, node, self.context_episodes)

    async def extract(
        self, node: EpisodicNode, context: list[EpisodicNode] | None = None
    ) -> Extracted:
        """The extraction call for a queued episode; raises LLMError."""
        if self.llm is None:
            raise LLMRequiredError("this worker has no LLM to extract text episodes")
        if context is None:
            context = await self.extraction_context(node)
        return await extract(self.llm, queued_episode(node), self.ontology, context)

    async def resolution_question(
        self, node: EpisodicNode, extracted: Extracted
    ) -> Question | None:
        """An extracted queued episode's resolution question, against the graph as it stands
        (kg.queue asks it while earlier episodes are being written; the episode's turn uses
        the reply if the graph then asks the same: see kg.ingest.resolution.question). None
        if there is nothing to ask, or if the episode's budget leaves no call for asking
        again in turn."""
        if len(extracted[1]) + 2 > LLM_CALLS_PER_EPISODE:
            return None
        episode = queued_episode(node)
        facts, _, _ = vet(extracted[0], episode, self.ontology, self.guards)
        return await question(
            facts,
            group_id=episode.group_id,
            store=self.store,
            ontology=self.ontology,
            now=self.clock.now(),
            embedder=await self.vectors.embedder_for(episode.group_id),
        )

    async def complete(
        self,
        node: EpisodicNode,
        owner: str,
        extracted: Extracted | None = None,
        answered: Answer | None = None,
    ) -> EpisodeResult:
        """Write a queued episode the worker `owner` holds: resolved and planned against the
        graph as it stands now, completing the stored node in place, and written only if
        the lease is still held (else LeaseLostError, nothing written) and nothing else wrote
        the group since the plan's reads (else re-planned, as `add` does: see kg.versioned).
        kg.queue calls this in the group's order; the extraction came before, outside the
        writer lock, and so may a resolution reply (`answered`, see `resolution_question`)."""
        episode = queued_episode(node)
        kind = planner_for(node.source)
        if kind.extracts and extracted is None:
            raise InputError(f"episode {node.uuid}: queued text without extraction")
        planner = (
            ExtractedPlanner(self.tools, episode, extracted, answered)
            if kind.extracts
            else kind(self.tools, episode)
        )
        async with self.writer(node.group_id):
            (result, plan), attempts = await retrying(
                self.store,
                self.clock,
                node.group_id,
                lambda base: self._complete_attempt(node, owner, planner, base),
            )
            await self.join_communities(plan)
        result.attempts = attempts
        return result

    async def _complete_attempt(
        self, node: EpisodicNode, owner: str, planner: Planner, base: GroupVersion
    ) -> tuple[EpisodeResult, WritePlan]:
        """One attempt of `complete`: read, plan and write at `base`, under the lease."""
        try:
            plan, summary = await planner.plan(node.uuid, None, base)
        except ValueError as exc:  # the ontology changed since it was queued
            raise InputError(str(exc)) from None
        ep = plan.episode
        ep.queued_at, ep.attempts = node.queued_at, node.attempts
        ep.idempotency_key, ep.session_id = node.idempotency_key, node.session_id
        ep.failure_reasons = node.failure_reasons
        plan.lease_owner = owner
        plan.base = base
        record(ep, summary)
        ep.llm_calls += node.llm_calls  # spent by failed attempts before this one
        ep.llm_tokens += node.llm_tokens
        ep.search_key = await key_for(self.store, ep)  # now with its facts
        # The content was embedded when it was queued; the key changed.
        await self.vectors.embed(
            node.group_id, plan.new_edges, plan.new_entities, ep, content=False
        )
        await self.store.apply(plan)
        done = EpisodeResult(
            episode_uuid=node.uuid, group_id=node.group_id, status="added", summary=summary
        )
        return done, plan

    async def join_communities(self, plan: WritePlan) -> None:
        """Entities an episode adds join their neighbours' community (marked stale)."""
        new = {n.uuid for n in plan.new_entities}
        neighbours: dict[str, set[str]] = {}
        for e in plan.new_edges:
            neighbours.setdefault(e.source_node_uuid, set()).add(e.target_node_uuid)
            neighbours.setdefault(e.target_node_uuid, set()).add(e.source_node_uuid)
        known = sorted({n for u in new for n in neighbours.get(u, ())} - new)
        if not known:
            return  # no new entity touches a stored one: nothing could join anything
        # Only the communities of those neighbours: this runs on the write path.
        existing = await self.store.communities(plan.group_id, having=known)
        if not existing:
            return
        joins = plan_joins(plan.group_id, sorted(new), neighbours, existing)
        if joins.members:
            # Unversioned: joins only add memberships and stale marks, which a concurrent
            # rebuild replaces anyway (it re-plans, since the episode's write moved the version).
            await self.store.write_communities(joins)


def _episode_attributes(episode: Episode, options: dict[str, object]) -> Attributes:
    """A `kg.ingest` span's attributes: what kind of episode, never what it says."""
    return {
        "kg.group_id": episode.group_id,
        "kg.episode.source": episode.source.value,
        "kg.episode.channel": episode.channel.value,
        "kg.extract": bool(options.get("extract", True)),
    }


def _result_attributes(result: EpisodeResult) -> Attributes:
    s = result.summary
    return {
        "kg.episode.status": result.status,
        "kg.facts.added": s.facts_added,
        "kg.facts.closed": s.facts_closed,
        "kg.llm_calls": s.llm_calls,
        "kg.attempts": result.attempts,
    }


def _bulk_attributes(episodes: list[Episode], options: dict[str, object]) -> Attributes:
    concurrency = options.get("concurrency", 0)
    return {
        "kg.episodes": len(episodes),
        "kg.concurrency": concurrency if isinstance(concurrency, int) else 0,
    }


def _bulk_result_attributes(result: BulkResult) -> Attributes:
    return {
        "kg.added": result.added,
        "kg.duplicate": result.duplicate,
        "kg.failed": len(result.failed),
    }
