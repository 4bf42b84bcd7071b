"""How one episode becomes a write plan: one planner per kind of episode, one interface.

- `StructuredPlanner`: the facts as given, checked by the ontology (no LLM); its reads are
  one round trip (`PlanningRead`), possibly made inside the write before it (`Ahead`).
- `ExtractedPlanner`: one extraction call (or the queue's, made before), vetting and
  resolution, kept across a write's attempts: a conflict re-plans, never re-asks the LLM.
- `RawPlanner`: a text episode stored as it is (`extract=False`): searchable, no facts.

`planner_for` is the one place an episode's kind is told; kg.pipeline drives a planner
through its attempts (read, plan, write) and kg.queue asks it whether an LLM is needed.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from kg.errors import ExtractionError, InputError, LLMRequiredError
from kg.ingest import content_hash, plan_structured_episode
from kg.ingest.batch import BatchTimelines
from kg.ingest.extraction import (
    LLM_EXTRACTOR,
    UNTRUSTED,
    Drops,
    Guards,
    extract,
    extraction_record,
    vet,
)
from kg.ingest.llm import LLMCall, LLMError, StructuredLLM
from kg.ingest.resolution import Answer, ResolutionReport, resolve
from kg.ingest.structured import (
    STRUCTURED_EXTRACTOR,
    check_structured,
    episodic_node,
    new_uuid,
    plan_facts,
    planning_names,
    stored_facts,
)
from kg.schemas.episode import Episode, EpisodeSource, StructuredFact
from kg.schemas.extraction import Extraction
from kg.schemas.graph import EpisodeStatus, EpisodicNode, Quarantined
from kg.schemas.ontology import Ontology
from kg.schemas.plan import GroupVersion, PlanSummary, WritePlan
from kg.schemas.store import GraphStore, PlanningNames, PlanningReads, Timelines
from kg.times import TransactionClock
from kg.vectors import Vectors

RAW_EXTRACTOR = "kg.raw/1"
LLM_CALLS_PER_EPISODE = 3  # extraction (with its retry) + resolution; summaries run per community
# An extraction call's reply and the calls it took (one, or two with the corrective retry).
Extracted = tuple[Extraction, list[LLMCall]]
# An extraction vetted and resolved: facts, drops, quarantined, extracted count, resolution,
# LLM calls. Kept across a write's attempts (a conflict re-plans it, never re-asks the LLM).
Resolved = tuple[
    list[StructuredFact], Drops, list[Quarantined], int, ResolutionReport, list[LLMCall]
]


# What a batch may carry into the next (entities, versions and timelines held,
# `BatchTimelines.size`): past it, closed versions and the least recently named entities are
# let go (`BatchTimelines.keep_within`) and read again when named, so what a long run holds
# stays bounded. 250,000: a few hundred MB; a 30,000-episode run of benchmarks/bulk_ingest.py
# holds under 300,000 (a bound of 300,000 re-read nothing there); larger groups read back what
# they name again.
HELD_MAX = 250_000


@dataclass
class _ReadAhead:
    """A planning read made in this process's last write of a group: `token`, the version
    that write made current; `names`, what the next episode (or batch) asked for; `reads`,
    the reply, read for `asked` (`held.unknown(names)` when `held` is carried, else `names`)."""

    token: str | None
    names: PlanningNames
    asked: PlanningNames
    reads: PlanningReads
    held: BatchTimelines | None


class Ahead:
    """Per group, the planning read that rode in this process's last write, for the episode
    it named (add_episodes knows the next one): the next structured episode plans from it
    without a round trip, if nothing moved the group since (see `PlanningRead.apply_many`).
    A batch also carries what it read and wrote (`BatchTimelines`) into the next one, whose
    read then asks only for the rest: used only at the version its own write made current
    (the fence: another writer's write in between makes a new version, and all is read)."""

    def __init__(self, store: GraphStore) -> None:
        self.store = store
        self._reads: dict[str, _ReadAhead] = {}

    def _take(self, group: str, names: PlanningNames, base: GroupVersion) -> _ReadAhead | None:
        """The read made ahead for `names` at `base`, if any (taken: an attempt uses it once,
        and what it holds changes as the attempt plans)."""
        ahead = self._reads.pop(group, None)
        if ahead is not None and ahead.token == base.token and ahead.names == names:
            return ahead
        return None

    async def reads(self, group: str, names: PlanningNames, base: GroupVersion) -> PlanningReads:
        """The reads for `names` at `base`: the ones made in the write that made `base`
        current, else read now."""
        ahead = self._take(group, names, base)
        if ahead is not None and ahead.held is None:
            return ahead.reads
        return await self.store.planning_reads(group, names)

    async def timelines(
        self, group: str, names: PlanningNames, base: GroupVersion
    ) -> BatchTimelines:
        """What a batch plans from at `base`: the batch before it's, with the rest read in
        its write, else a read of all of `names` now."""
        ahead = self._take(group, names, base)
        if ahead is None:
            return BatchTimelines(await self.store.planning_reads(group, names), names)
        if ahead.held is None:
            return BatchTimelines(ahead.reads, names)
        ahead.held.renew(ahead.reads, ahead.asked)
        return ahead.held

    async def apply_many(
        self,
        plans: list[WritePlan],
        then: PlanningNames | None,
        held: BatchTimelines | None = None,
    ) -> GroupVersion:
        """Write `plans` as one unit, reading ahead for `then` inside the write: with `held`
        (what the plans were made from, with them committed), only what it lacks."""
        if held is not None and then is None:
            held = None
        if held is not None and then is not None:
            held.keep_within(HELD_MAX, then)
        asked = held.unknown(then) if held is not None and then is not None else then
        version, next_reads = await self.store.apply_many(plans, asked)
        if then is not None and asked is not None and next_reads is not None:
            self._reads[plans[0].group_id] = _ReadAhead(
                version.token, then, asked, next_reads, held
            )
        return version

    def drop(self, group: str) -> None:
        self._reads.pop(group, None)


@dataclass(frozen=True)
class Tools:
    """What planners plan with: the store, the model, the rules and this process's caches."""

    store: GraphStore
    ontology: Ontology
    clock: TransactionClock
    llm: StructuredLLM | None
    guards: Guards
    context_episodes: int
    vectors: Vectors
    ahead: Ahead


def record(node: EpisodicNode, s: PlanSummary) -> None:
    """Per-episode metrics travel on the episode itself: written in the same transaction."""
    s.facts_quarantined = sum(q.kind == "fact" for q in s.quarantined)
    s.passages_quarantined = sum(q.kind == "passage" for q in s.quarantined)
    for name, value in s.counters():
        setattr(node, name, value)
    if s.quarantined:
        node.quarantine = json.dumps(
            [q.model_dump(mode="json", exclude_none=True) for q in s.quarantined],
            ensure_ascii=False,
        )


def first_episode(found: list[EpisodicNode]) -> EpisodicNode | None:
    """Of the episodes an episode would duplicate, the one that counts: a failed one only
    when there is no other (as `episode_by_key` picks)."""
    ranked = sorted(found, key=lambda e: (e.status == EpisodeStatus.failed, e.created_at))
    return ranked[0] if ranked else None


async def plan_structured(
    tools: Tools,
    episode: Episode,
    uuid: str,
    timelines: Timelines | None = None,
    digest: str | None = None,
) -> tuple[WritePlan, PlanSummary]:
    """`timelines`: what to plan from (the store itself unless the reads were made);
    `digest`: the episode's content hash, if made."""
    untrusted = episode.channel in UNTRUSTED
    kept, held = tools.guards.split_facts(episode.facts) if untrusted else (list(episode.facts), [])
    plan, summary = await plan_structured_episode(
        episode,
        timelines or tools.store,
        tools.ontology,
        tools.clock.now(),
        facts=kept,
        uuid=uuid,
        digest=digest,
    )
    summary.quarantined = held
    return plan, summary


class Planner(ABC):
    """One episode's planning, kept across its write's attempts (see kg.versioned): `read`
    what planning needs (the stored episode it would duplicate, if any), `plan` it, `write`
    the plan. The class attributes say what the kind of episode needs."""

    extractor: ClassVar[str]
    extracts: ClassVar[bool] = False  # needs the LLM (a worker without one leaves it queued)
    queues: ClassVar[bool] = True  # `wait=False` queues it (else it is written at once)
    batches: ClassVar[bool] = False  # add_episodes plans runs of them together

    def __init__(self, tools: Tools, episode: Episode) -> None:
        self.tools = tools
        self.episode = episode

    @classmethod
    def check(cls, tools: Tools, episode: Episode, *, queued: bool) -> None:
        """Refuse, before anything is read or written, an episode that cannot be planned."""
        return None

    @staticmethod
    def queued_content(episode: Episode) -> str | None:
        """What a queued node of it stores as content (None: the episode's text)."""
        return None

    @staticmethod
    def queued_episode(node: EpisodicNode) -> Episode:
        """The episode a queued node holds, as it was given."""
        return Episode(
            group_id=node.group_id,
            source=node.source,
            reference_time=node.valid_at,
            name=node.name,
            content=node.content,
            source_description=node.source_description,
            channel=node.channel,
            trust=node.trust,
            session_id=node.session_id,
        )

    async def read(self, base: GroupVersion) -> EpisodicNode | None:
        """The stored episode this one would duplicate (content hash or idempotency key)."""
        group, key = self.episode.group_id, self.episode.idempotency_key
        if key is None:
            return await self.tools.store.episode_by_hash(group, content_hash(self.episode))
        return await self.tools.store.episode_by_key(group, content_hash(self.episode), key)

    @abstractmethod
    async def plan(
        self, uuid: str, failed: str | None, base: GroupVersion
    ) -> tuple[WritePlan, PlanSummary]:
        """The write plan against the graph as it stands (`failed`: the failed record of
        this episode it replaces)."""

    async def write(self, plan: WritePlan, then: PlanningNames | None) -> GroupVersion:
        return await self.tools.store.apply(plan)

    @property
    def joins(self) -> bool:
        """Whether entities it adds may join communities (see `Pipeline.join_communities`)."""
        return True


class StructuredPlanner(Planner):
    extractor = STRUCTURED_EXTRACTOR
    batches = True
    reads: PlanningReads | None = None  # the attempt's reads; none: plan from the store

    @classmethod
    def check(cls, tools: Tools, episode: Episode, *, queued: bool) -> None:
        try:
            check_structured(episode, tools.ontology)
        except ValueError as exc:
            raise InputError(str(exc)) from None

    @staticmethod
    def queued_content(episode: Episode) -> str | None:
        return json.dumps(
            [f.model_dump(mode="json", exclude_none=True) for f in episode.facts],
            ensure_ascii=False,
        )

    @staticmethod
    def queued_episode(node: EpisodicNode) -> Episode:
        return Episode(
            group_id=node.group_id,
            source=node.source,
            reference_time=node.valid_at,
            name=node.name,
            content="",
            facts=stored_facts(node),
            source_description=node.source_description,
            channel=node.channel,
            trust=node.trust,
            session_id=node.session_id,
        )

    async def read(self, base: GroupVersion) -> EpisodicNode | None:
        names = planning_names(self.episode, self.tools.ontology)
        self.reads = await self.tools.ahead.reads(self.episode.group_id, names, base)
        return first_episode(self.reads.episodes)

    async def plan(
        self, uuid: str, failed: str | None, base: GroupVersion
    ) -> tuple[WritePlan, PlanSummary]:
        timelines = BatchTimelines(self.reads) if self.reads is not None else None
        return await plan_structured(self.tools, self.episode, uuid, timelines)

    async def write(self, plan: WritePlan, then: PlanningNames | None) -> GroupVersion:
        if self.reads is not None and then is not None:
            return await self.tools.ahead.apply_many([plan], then)
        return await self.tools.store.apply(plan)

    @property
    def joins(self) -> bool:
        # A group that had no communities when it was read has none to join.
        return self.reads is None or bool(self.reads.communities)


class RawPlanner(Planner):
    extractor = RAW_EXTRACTOR
    queues = False

    async def plan(
        self, uuid: str, failed: str | None, base: GroupVersion
    ) -> tuple[WritePlan, PlanSummary]:
        episode = self.episode
        node = episodic_node(
            episode, uuid=uuid, now=self.tools.clock.now(), extractor=RAW_EXTRACTOR
        )
        node.extraction = extraction_record([])
        plan, summary = WritePlan(group_id=episode.group_id, episode=node), PlanSummary()
        if episode.channel in UNTRUSTED:
            summary.quarantined = self.tools.guards.passages(episode.content)
        return plan, summary


class ExtractedPlanner(Planner):
    """`extracted`: the extraction the queue made before (else this planner makes it, and
    records a failed call as a failed episode); `answered`: a resolution reply got ahead."""

    extractor = LLM_EXTRACTOR
    extracts = True

    def __init__(
        self,
        tools: Tools,
        episode: Episode,
        extracted: Extracted | None = None,
        answered: Answer | None = None,
    ) -> None:
        super().__init__(tools, episode)
        self.extracted = extracted
        self.answered = answered
        self.resolved: Resolved | None = None
        self.error: LLMError | None = None

    @classmethod
    def check(cls, tools: Tools, episode: Episode, *, queued: bool) -> None:
        if tools.llm is None and not queued:
            raise LLMRequiredError(
                f"{episode.source.value!r} episodes need an LLM: open kg with "
                "llm=OpenAILLM(...) (any OpenAI-compatible endpoint), send structured 'facts' "
                "episodes, or store it unextracted with extract=False"
            )

    async def plan(
        self, uuid: str, failed: str | None, base: GroupVersion
    ) -> tuple[WritePlan, PlanSummary]:
        """Extract and resolve once: a conflict re-plans the resolved facts on fresh reads."""
        if self.resolved is None and self.error is None:
            extracted = self.extracted
            if extracted is None:
                assert self.tools.llm is not None
                store, group = self.tools.store, self.episode.group_id
                context = await store.recent_episodes(group, self.tools.context_episodes)
                try:
                    extracted = await extract(
                        self.tools.llm, self.episode, self.tools.ontology, context
                    )
                except LLMError as exc:
                    self.error = exc
            if extracted is not None:
                self.resolved = await self._resolve(*extracted)
        if self.error is not None:
            await self._fail(failed, base, self.error)
        assert self.resolved is not None
        return await self._plan_resolved(uuid, self.resolved)

    async def _fail(self, failed: str | None, base: GroupVersion, error: LLMError) -> None:
        """Record the attempt (retryable: re-adding the episode tries again), no facts."""
        episode, tools = self.episode, self.tools
        node = episodic_node(
            episode, uuid=new_uuid(), now=tools.clock.now(), extractor=LLM_EXTRACTOR
        )
        node.status, node.error = EpisodeStatus.failed, str(error)
        spent = list(getattr(error, "calls", []))
        node.llm_calls = len(spent)
        node.llm_tokens = sum(c.prompt_tokens + c.completion_tokens for c in spent)
        await tools.store.apply(
            WritePlan(group_id=episode.group_id, episode=node, replaces_failed=failed, base=base)
        )
        raise ExtractionError(f"extraction failed, episode recorded as failed: {error}") from error

    async def _resolve(self, extraction: Extraction, calls: list[LLMCall]) -> Resolved:
        """Vet and resolve the extraction: what its plans (one per attempt) are made of."""
        tools, episode, answered = self.tools, self.episode, self.answered
        assert tools.llm is not None
        spent = len(calls) + (len(answered.calls) if answered is not None else 0)
        facts, drops, held = vet(extraction, episode, tools.ontology, tools.guards)
        extracted = len(facts)
        facts, resolution, more = await resolve(
            facts,
            group_id=episode.group_id,
            store=tools.store,
            ontology=tools.ontology,
            llm=tools.llm,
            now=tools.clock.now(),
            reference_time=episode.reference_time,
            embedder=await tools.vectors.embedder_for(episode.group_id),
            max_attempts=min(2, LLM_CALLS_PER_EPISODE - spent),
            answered=answered,
        )
        return facts, drops, held, extracted, resolution, [*calls, *more]

    async def _plan_resolved(self, uuid: str, resolved: Resolved) -> tuple[WritePlan, PlanSummary]:
        """Plan resolved facts against the graph as it stands now."""
        facts, drops, held, extracted, resolution, calls = resolved
        tools = self.tools
        now = tools.clock.now()
        node = episodic_node(self.episode, uuid=uuid, now=now, extractor=LLM_EXTRACTOR)
        node.extraction = extraction_record(facts)  # resolved: replay needs no LLM
        node.facts_extracted = extracted
        plan, summary = await plan_facts(node, facts, tools.store, tools.ontology, now)
        summary.facts_dropped = {k: v for k, v in drops.model_dump().items() if v}
        summary.quarantined = held
        summary.entities_merged = resolution.entities_merged
        summary.facts_merged = resolution.facts_merged
        summary.facts_contradicted = resolution.facts_contradicted
        summary.resolution_error = resolution.error
        summary.llm_calls = len(calls)
        summary.prompt_tokens = sum(c.prompt_tokens for c in calls)
        summary.completion_tokens = sum(c.completion_tokens for c in calls)
        return plan, summary


def planner_for(source: EpisodeSource, *, extract: bool = True) -> type[Planner]:
    """The planner of an episode of this source: structured facts, or text extracted by the
    LLM, or (`extract=False`) text stored as it is."""
    if source is EpisodeSource.facts:
        return StructuredPlanner
    return ExtractedPlanner if extract else RawPlanner
