"""The public async API: `KG`.

```
async with await KG.open() as kg:                # embedded FalkorDB under KG_HOME
    await kg.add_episode(source="facts", reference_time=now, facts=[...])
    await kg.facts(subject="Alice", valid_at=march)   # what was true in March
```
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from pydantic import BaseModel, Field, ValidationError

from kg.erasure import ErasureReceipt, erase_entity, erase_group, finish_erasure
from kg.errors import (
    ExtractionError,
    InputError,
    KGError,
    LLMRequiredError,
    NotFoundError,
    StoreError,
    WriteConflictError,
    validation_message,
)
from kg.graphiti import AdoptReport, plan_adoption
from kg.ingest import content_hash, name_key, plan_structured_episode
from kg.ingest.communities import (
    MAX_ITERATIONS,
    community_nodes,
    plan_joins,
    plan_rebuild,
    summarize,
)
from kg.ingest.communities import clusters as community_clusters
from kg.ingest.embeddings import recorded_embedder
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
from kg.ingest.resolution import Answer, Question, ResolutionReport, question, resolve
from kg.ingest.structured import (
    STRUCTURED_EXTRACTOR,
    BatchTimelines,
    check_structured,
    episodic_node,
    new_uuid,
    plan_facts,
    planning_names,
    stored_facts,
)
from kg.retrieval import (
    DEFAULT_RECIPE,
    RECIPES,
    CrossEncoder,
    SearchConfig,
    SearchError,
    SearchResults,
)
from kg.retrieval import render_context as _render_context
from kg.retrieval import search as _search
from kg.retrieval.context import approx_tokens
from kg.rollback import UNWRITTEN, ReplayReport, RollbackReport, plan_replay, plan_rollback
from kg.schemas.embedder import Embedder, EmbeddingModel
from kg.schemas.episode import Channel, Episode, EpisodeSource, StructuredFact, TrustTier
from kg.schemas.extraction import Extraction
from kg.schemas.graph import (
    AuditEvent,
    EntityNode,
    EpisodeStatus,
    EpisodicNode,
    Fact,
    FactEdge,
    Quarantined,
)
from kg.schemas.metrics import (
    ApiMetrics,
    CallKind,
    IngestMetrics,
    Metrics,
    QueryMetrics,
    valid_call_name,
)
from kg.schemas.ontology import DEFAULT_ONTOLOGY, Ontology
from kg.schemas.plan import EpisodeKey, GroupVersion, PlanSummary, WritePlan
from kg.schemas.search import SearchView
from kg.schemas.store import (
    Community,
    EntitySummary,
    FactQuery,
    GraphStore,
    PlanningNames,
    PlanningReads,
    StoreStats,
    Timelines,
)
from kg.schemas.validation import check_group_id, check_text
from kg.search_keys import key_for
from kg.store import open_store
from kg.store.falkordb.embedded import Durability, ProgressCallback
from kg.times import TransactionClock, utc
from kg.transfer import TransferReport, export_lines, import_lines
from kg.versioned import retrying

log = logging.getLogger("kg")
RAW_EXTRACTOR = "kg.raw/1"
LLM_CALLS_PER_EPISODE = 3  # extraction (with its retry) + resolution; summaries run per community
COMMUNITY_MAX_FACTS = 100_000  # the most one fact query returns: more fails, never truncates
EPISODE_EMBED_CHARS = 2000  # MiniLM-size models read ~256 tokens; more only costs time
# add_episodes: consecutive structured episodes of a group planned in order, written together
# (a bigger batch spreads each write's fixed cost further, and re-plans more when another
# writer of the group cuts in)
BULK_BATCH = 200
# An extraction vetted and resolved: facts, drops, quarantined, extracted count, resolution,
# LLM calls. Kept across a write's attempts (a conflict re-plans it, never re-asks the LLM).
Resolved = tuple[
    list[StructuredFact], Drops, list[Quarantined], int, ResolutionReport, list[LLMCall]
]


SourceName = Literal["message", "text", "json", "facts"]
ChannelName = Literal["user", "tool", "document", "agent"]


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


def _validate_episode(fields: dict[str, Any], where: str) -> Episode:
    try:
        return Episode.model_validate(fields)
    except ValidationError as exc:
        raise InputError(f"{where}: {validation_message(exc)}") from None


def _text(field: str, value: str) -> str:
    """A string argument the store can carry (no NUL, no lone surrogate), or an InputError."""
    try:
        return check_text(value)
    except ValueError as exc:
        raise InputError(f"{field}: {exc}") from None


def _when(field: str, value: datetime | None) -> datetime | None:
    """A time argument in UTC: aware, and within years 1-9999 once converted."""
    return None if value is None else utc(value, field=field)


def _limit(limit: int, most: int) -> None:
    # The store reads a limit as a 64-bit integer: 10**30 would come back as no rows at all.
    if not 1 <= limit <= most:
        raise InputError(f"limit must be in 1..{most}, got {limit}")


def _record(node: EpisodicNode, s: PlanSummary) -> None:
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


class _OneByOne(Exception):
    """A batch that must go one episode at a time (see `KG._add_batch`)."""


def _batches(indexes: list[int], episodes: list[Episode]) -> list[list[int]]:
    """A group's episodes (in order) cut into what `add_episodes` writes together: runs of
    consecutive structured episodes, BULK_BATCH at most, and any other episode alone."""
    out: list[list[int]] = []
    for i in indexes:
        structured = episodes[i].source is EpisodeSource.facts
        last = out[-1] if out else None
        if (structured and last is not None and len(last) < BULK_BATCH
                and episodes[last[0]].source is EpisodeSource.facts):  # fmt: skip
            last.append(i)
        else:
            out.append([i])
    return out


def _first_episode(found: list[EpisodicNode]) -> EpisodicNode | None:
    """Of the episodes an episode would duplicate, the one that counts: a failed one only
    when there is no other (as `episode_by_key` picks)."""
    ranked = sorted(found, key=lambda e: (e.status == EpisodeStatus.failed, e.created_at))
    return ranked[0] if ranked else None


def queued_episode(node: EpisodicNode) -> Episode:
    """The episode a queued node holds, as it was given (structured facts from its content)."""
    structured = node.source is EpisodeSource.facts
    return Episode(
        group_id=node.group_id, source=node.source, reference_time=node.valid_at,
        name=node.name, content="" if structured else node.content,
        facts=stored_facts(node) if structured else [],
        source_description=node.source_description, channel=node.channel, trust=node.trust,
        session_id=node.session_id,
    )  # fmt: skip


class QuarantineEntry(BaseModel):
    """One quarantined fact or passage, with the episode it came in (see `KG.quarantine`)."""

    episode_uuid: str
    created_at: datetime
    channel: Channel
    source_description: str
    item: Quarantined


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


class Explanation(BaseModel):
    versions: list[Fact]
    episodes: list[EpisodicNode]


async def _recorded_embedder(store: GraphStore, group_id: str) -> Embedder | None:
    """The model recorded for the group, if it can be loaded here; else None (logged)."""
    KG._check_group(group_id)
    recorded = await store.embedding_model(group_id)
    if recorded is None:
        return None
    embedder = recorded_embedder(recorded)
    if embedder is None:
        log.warning(
            "group %r was embedded with %s, which cannot be loaded here: running without "
            "embeddings (no cosine search); pass the embedder explicitly",
            group_id,
            recorded,
        )
    return embedder


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
        cross_encoder: CrossEncoder | None = None,
    ) -> None:
        self.store = store
        self.cross_encoder = cross_encoder
        self.ontology = ontology
        self.clock = clock or TransactionClock()
        self.llm = llm
        self.guards = guards or Guards()
        self.context_episodes = context_episodes
        self.embedder = embedder
        self._writers: dict[str, asyncio.Lock] = {}
        # Per group, the version this process's last episode write made current: the next
        # episode plans at it without reading it (a stale one only costs a re-plan; see
        # kg.versioned.retrying).
        self._written: dict[str, GroupVersion] = {}
        # Per group, the planning read that rode in that write, for the episode it named
        # (add_episodes knows the next one): (the version it stands at, what it named, it).
        self._ahead: dict[str, tuple[str | None, PlanningNames, PlanningReads]] = {}
        self._searchable: set[str] = set()
        self._models: dict[str, EmbeddingModel | None] = {}  # checked: on record per group
        self._queries: dict[str, QueryMetrics] = {}  # not yet persisted, per group
        self._api: dict[str, ApiMetrics] = {}  # API calls (kg serve, MCP), not yet persisted
        # Called with the group after each enqueue: a worker in this process wakes at once.
        self.enqueue_listeners: list[Callable[[str], None]] = []

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
        embedder: Embedder | Literal["auto"] | None = None,
        group_id: str = "default",
        cross_encoder: CrossEncoder | None = None,
        progress: ProgressCallback | None = None,
    ) -> KG:
        """Open a store by URI (embedded FalkorDB by default).

        With an `embedder`, facts, entity names and episodes get embeddings and the store gets
        vector indexes of its dimension. A group's first embedded write records the model
        (name and dimension); a group embedded by another model is refused. `embedder="auto"`
        loads the model recorded for `group_id` when it can be loaded here (the packaged
        MiniLM, or a sentence-transformers model at a local path), else runs without (logged).
        A `cross_encoder` enables the cross-encoder reranker. `progress` is called while the
        embedded store loads its data (a large store takes a while).
        """
        if embedder == "auto":
            store = await open_store(uri, home=home, durability=durability, progress=progress)
            try:
                embedder = await _recorded_embedder(store, group_id)
            except BaseException:
                await store.close()
                raise
            if embedder is None:
                return await cls(
                    store, ontology=ontology, llm=llm, guards=guards, cross_encoder=cross_encoder
                )._opened()
            await store.close()  # reopened below, with vector indexes of the model's dimension
        dim = embedder.dim if embedder is not None else None
        store = await open_store(uri, home=home, durability=durability, embedding_dim=dim,
                                 progress=progress)  # fmt: skip
        return await cls(
            store,
            ontology=ontology,
            llm=llm,
            guards=guards,
            embedder=embedder,
            cross_encoder=cross_encoder,
        )._opened()

    async def _opened(self) -> Self:
        """What `open` does once the store is up: finish erasures a crash interrupted."""
        try:
            await self.finish_erasures()
        except KGError as exc:  # the store opens anyway; a re-run of the erasure finishes it
            log.warning("an interrupted erasure is still unfinished: %s", exc)
        return self

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Persist the query metrics gathered in this process, then close the store. A store
        that is gone by then costs the metrics (logged), never the close."""
        try:
            await self.flush_metrics()
        except KGError as exc:
            log.warning("query metrics not saved: %s", exc)
        finally:
            await self.store.close()

    async def flush_metrics(self) -> None:
        """Add this process's query and API call counters to each group's stored ones (a
        write or two a group). A group that holds nothing gets none: counting never creates
        a group, and an erased group's are dropped."""
        pending, self._queries = self._queries, {}
        calls, self._api = self._api, {}
        for group, m in pending.items():
            if m.queries + m.contexts and await self.store.has_group(group):
                await self.store.record_query_metrics(group, m)
        for group, a in calls.items():
            if not a.empty and await self.store.has_group(group):
                await self.store.record_api_metrics(group, a)

    def record_call(
        self, group_id: str, kind: CallKind, name: str, seconds: float, *, error: bool
    ) -> None:
        """Count one API call made in the group's name: an HTTP route template or an MCP tool
        (kg.server); persisted with the query metrics and shown by `kg stats`."""
        if valid_call_name(kind, name):
            self._api.setdefault(group_id, ApiMetrics()).add(kind, name, seconds, error=error)

    async def metrics(self, group_id: str = "default") -> Metrics:
        """Ingest metrics (summed over stored episodes) and query metrics (stored + unflushed)."""
        self._check_group(group_id)
        queries = self._queries.get(group_id, QueryMetrics())
        api = self._api.get(group_id, ApiMetrics())
        if not await self.store.has_group(group_id):
            return Metrics(group_id=group_id, ingest=IngestMetrics(), queries=queries, api=api)
        return Metrics(
            group_id=group_id,
            ingest=await self.store.ingest_metrics(group_id),
            queries=(await self.store.query_metrics(group_id)).merged(queries),
            api=(await self.store.api_metrics(group_id)).merged(api),
            queue=await self.store.queue_metrics(group_id, self.clock.now()),
        )

    def _observe(self, results: SearchResults) -> None:
        m = QueryMetrics(
            queries=1,
            zero_result_queries=int(not (results.facts or results.entities or results.episodes
                                         or results.communities)),
            branch_errors=sum(1 for b in results.branches if b.error),
            latency_ms_total=results.latency_ms,
            branch_hits={k: b.hits for b in results.branches
                         if (k := QueryMetrics.branch_key(b.scope.value, b.method))},
        )  # fmt: skip
        self._queries[results.group_id] = self._queries.get(
            results.group_id, QueryMetrics()
        ).merged(m)

    # -- writes ---------------------------------------------------------------------------

    async def add_episode(
        self,
        episode: Episode | None = None,
        /,
        *,
        source: EpisodeSource | SourceName | None = None,
        reference_time: datetime | None = None,
        content: str | None = None,
        facts: Sequence[StructuredFact | Mapping[str, Any]] | None = None,
        group_id: str | None = None,
        channel: Channel | ChannelName | None = None,
        trust: TrustTier | int | str | None = None,
        source_description: str | None = None,
        name: str | None = None,
        session_id: str | None = None,
        turns: tuple[int, int] | None = None,
        extract: bool = True,
        wait: bool = True,
        after_seconds: float | None = None,
    ) -> EpisodeResult:
        """Ingest one episode; re-adding the same content to the same group is a no-op.

        Pass an `Episode`, or its fields as keywords (not both):

        Args:
            source: "facts" (structured, no LLM), or "message", "text", "json" (extracted by
                the LLM kg was opened with).
            reference_time: When the episode happened (timezone-aware): the default valid
                time of its facts, and the anchor of relative times in its text.
            content: The text of a message, text or JSON episode.
            facts: The statements of a "facts" episode: `StructuredFact`s or dicts with
                subject, predicate, object and optional valid_at, invalid_at, fact.
            group_id: The group (tenant) it belongs to; default "default".
            channel: Where it came from: "user" (default), "tool", "document", "agent".
            trust: Trust tier (name or 0-3) when not the channel's; higher closes lower.
            source_description: Free text naming the source, e.g. a URL; rollback can
                select episodes by it.
            name: A short name for the episode.
            session_id: The conversation it belongs to. With `turns` (first, last), the
                idempotency key (source, session, turns): a second episode with the same key
                is a duplicate whatever its text.
            extract: False stores a text, message or JSON episode as it is, with no LLM
                call: searchable (full-text, and cosine with an embedder), but adds no facts.
            wait: False stores the episode at once as `queued` and returns its id: it is
                searchable straight away (BM25, and cosine with an embedder), and a worker
                (`kg worker`, `kg.queue.Worker`) extracts and writes it later, in order.
            after_seconds: With `wait=False` and a `session_id`: hold the session's queued
                episodes until this long after its latest message (a debounce; each new
                message restarts the wait).

        Raises:
            InputError: the episode is malformed or the ontology refuses it (nothing written).
            ExtractionError: the LLM step failed; the episode is recorded as failed and
                re-adding it retries.
        """
        given = {
            "source": source,
            "reference_time": reference_time,
            "content": content,
            "facts": facts,
            "group_id": group_id,
            "channel": channel,
            "trust": trust,
            "source_description": source_description,
            "name": name,
            "session_id": session_id,
            "turns": turns,
        }
        fields = {k: v for k, v in given.items() if v is not None}
        if episode is None:
            episode = _validate_episode(fields, "invalid episode")
        elif fields:
            raise TypeError("pass either an Episode or keyword fields, not both")
        if after_seconds is not None and (wait or not 0 < after_seconds <= 86_400):
            raise InputError("after_seconds needs wait=False and a value in (0, 86400]")
        queue = not wait and (extract or episode.source is EpisodeSource.facts)
        self.check_episode(episode, extract=extract, queued=queue)
        if queue:
            return await self._enqueue(episode, after_seconds=after_seconds)
        return await self._add(episode, extract=extract)

    def check_episode(
        self, episode: Episode, *, extract: bool = True, queued: bool = False
    ) -> None:
        """Refuse, before anything is read or written, an episode `add_episode` could not take:
        a text episode with no LLM to extract it (`LLMRequiredError`; a queued one needs the
        LLM in the worker instead), or structured facts the ontology refuses (`InputError`)."""
        if episode.source is EpisodeSource.facts:
            try:
                check_structured(episode, self.ontology)
            except ValueError as exc:
                raise InputError(str(exc)) from None
        elif extract and self.llm is None and not queued:
            raise LLMRequiredError(
                f"{episode.source.value!r} episodes need an LLM: open kg with "
                "llm=OpenAILLM(...) (any OpenAI-compatible endpoint), send structured 'facts' "
                "episodes, or store it unextracted with extract=False"
            )

    async def add_episodes(
        self,
        episodes: Iterable[Episode | Mapping[str, Any]],
        *,
        concurrency: int = 4,
        extract: bool = True,
        wait: bool = True,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> BulkResult:
        """Ingest many episodes: validated in full before any write, then each group's in
        reference-time order (ties in the order given) by one writer, up to `concurrency`
        groups at once; a group's consecutive structured episodes are planned together and
        written as one atomic unit (up to BULK_BATCH: the graph one by one gives).
        `wait=False` enqueues them instead (see `add_episode`).

        Re-running skips what is already in (by content hash), so an interrupted run resumes.
        A text episode whose extraction fails is recorded as failed, counted in the result
        and retried by the next run; any other error stops the run (what is in stays in).
        `on_progress(done, total)` is called after each episode (a batch's once it is written).
        """
        if not 1 <= concurrency <= 64:
            raise InputError(f"concurrency must be in 1..64, got {concurrency}")
        checked: list[Episode] = []
        for i, item in enumerate(episodes):
            where = f"episodes[{i}]"
            ep = item if isinstance(item, Episode) else _validate_episode(dict(item), where)
            try:
                self.check_episode(ep, extract=extract, queued=not wait)
            except InputError as exc:
                raise type(exc)(f"{where}: {exc}") from None
            checked.append(ep)
        if not wait:
            return await self._enqueue_many(checked, extract=extract, on_progress=on_progress)
        # Each structured episode's content hash, made once: its batch's read, then its node.
        digests = {i: content_hash(ep) for i, ep in enumerate(checked)
                   if ep.source is EpisodeSource.facts}  # fmt: skip
        by_group: dict[str, list[int]] = {}
        for i in sorted(range(len(checked)), key=lambda i: checked[i].reference_time):
            by_group.setdefault(checked[i].group_id, []).append(i)
        results: list[EpisodeResult | None] = [None] * len(checked)
        failed: dict[int, str] = {}
        slots = asyncio.Semaphore(concurrency)
        done = 0

        async def one_group(indexes: list[int]) -> None:
            nonlocal done
            batches = _batches(indexes, checked)
            names: PlanningNames | None = None  # the batch's, made as the one before's `then`
            async with slots:
                for k, batch in enumerate(batches):
                    episodes = [checked[i] for i in batch]
                    after = batches[k + 1] if k + 1 < len(batches) else []
                    if episodes[0].source is EpisodeSource.facts:
                        hashes = [digests[i] for i in batch]
                        if names is None:
                            names = planning_names(episodes, self.ontology, hashes)
                        then = None
                        if after and checked[after[0]].source is EpisodeSource.facts:
                            then = planning_names([checked[i] for i in after], self.ontology,
                                                  [digests[i] for i in after])  # fmt: skip
                        added = await self._add_batch(episodes, names, then, hashes)
                        for i, result in zip(batch, added, strict=True):
                            results[i] = result
                        names = then
                    else:
                        try:
                            results[batch[0]] = await self._add(episodes[0], extract=extract)
                        except ExtractionError as exc:
                            failed[batch[0]] = str(exc)
                    for _ in batch:
                        done += 1
                        if on_progress is not None:
                            on_progress(done, len(checked))

        try:
            async with asyncio.TaskGroup() as tasks:
                for indexes in by_group.values():
                    tasks.create_task(one_group(indexes))
        except BaseExceptionGroup as group:
            raise group.exceptions[0] from None  # the first error, as add_episode raises it
        return BulkResult(
            results=[r for r in results if r is not None],
            failed=[f"episodes[{i}]: {failed[i]}" for i in sorted(failed)],
        )

    async def _enqueue_many(
        self,
        episodes: list[Episode],
        *,
        extract: bool,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> BulkResult:
        results = []
        for i, ep in enumerate(episodes):
            if extract or ep.source is EpisodeSource.facts:
                results.append(await self._enqueue(ep))
            else:
                results.append(await self._add(ep, extract=False))
            if on_progress is not None:
                on_progress(i + 1, len(episodes))
        return BulkResult(results=results)

    async def _enqueue(
        self, episode: Episode, *, after_seconds: float | None = None
    ) -> EpisodeResult:
        """Store a checked episode as `queued`: durable, searchable, extracted later."""
        group = episode.group_id
        self._check_group(group)
        now = self.clock.now()
        structured = episode.source is EpisodeSource.facts
        content = (
            json.dumps([f.model_dump(mode="json", exclude_none=True) for f in episode.facts],
                       ensure_ascii=False) if structured else None
        )  # fmt: skip
        extractor = STRUCTURED_EXTRACTOR if structured else LLM_EXTRACTOR
        node = episodic_node(
            episode, uuid=new_uuid(), now=now, content=content, extractor=extractor
        )
        node.status, node.queued_at = EpisodeStatus.queued, now
        if after_seconds is not None and episode.session_id is not None:
            node.next_attempt_at = now + timedelta(seconds=after_seconds)
        node.search_key = await key_for(self.store, node)
        await self._embed(group, [], None, node)
        stored, created = await self.store.enqueue(node)
        if created and node.next_attempt_at is not None and episode.session_id is not None:
            await self.store.debounce(group, episode.session_id, node.next_attempt_at)
        if created:
            for listener in self.enqueue_listeners:
                listener(group)
        return EpisodeResult(episode_uuid=stored.uuid, group_id=group,
                             status="queued" if created else "duplicate",
                             summary=PlanSummary())  # fmt: skip

    async def _existing(self, episode: Episode) -> EpisodicNode | None:
        group, key = episode.group_id, episode.idempotency_key
        if key is None:
            return await self.store.episode_by_hash(group, content_hash(episode))
        return await self.store.episode_by_key(group, content_hash(episode), key)

    async def _add_batch(
        self,
        episodes: list[Episode],
        names: PlanningNames,
        then: PlanningNames | None,
        digests: list[str],
    ) -> list[EpisodeResult]:
        """Checked structured episodes of one group, in order, planned together and written as
        one atomic unit (re-planned together if another writer changed the group meanwhile):
        the graph `_add` one by one gives. `then`: the next batch's planning read, made in
        this one's write. A group with communities (each episode joins them), or a batch
        the store refuses, goes one by one instead: what the episodes before the one at fault
        wrote stays written, and that one's error is raised as `_add` raises it. `names`:
        the batch's own planning read (`planning_names` of them all); `digests`: the
        episodes' content hashes."""
        group = episodes[0].group_id
        try:
            async with self._writer(group):
                results, attempts = await retrying(
                    self.store, self.clock, group,
                    lambda base: self._attempt_batch(episodes, names, base, then, digests),
                    known=self._written.pop(group, None),
                )  # fmt: skip
        except WriteConflictError:
            raise  # every plan overtaken: one by one would fare no better
        except (_OneByOne, StoreError, InputError):
            self._ahead.pop(group, None)
            out = []
            for k, episode in enumerate(episodes):
                after = episodes[k + 1] if k + 1 < len(episodes) else None
                next_names = planning_names(after, self.ontology) if after is not None else None
                out.append(await self._add(episode, extract=True, then=next_names))
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
        """One attempt of `_add_batch`: one planning read for the whole batch (or the one
        made in the write before), each episode planned from it and from the plans before
        it (`BatchTimelines`), then one write of them all at `base`."""
        group = episodes[0].group_id
        ahead = self._ahead.pop(group, None)
        if ahead is not None and ahead[0] == base.token and ahead[1] == names:
            reads = ahead[2]
        else:
            reads = await self.store.planning_reads(group, names)
        if reads.communities:
            self._written[group] = base
            raise _OneByOne
        timelines = BatchTimelines(reads)
        results, plans = [], []
        for episode, digest in zip(episodes, digests, strict=True):
            # Planned first (it has its content hash then); a duplicate's plan is dropped.
            plan, summary = await self._plan_structured(episode, new_uuid(), timelines, digest)
            existing = _first_episode(
                timelines.duplicates(plan.episode.content_hash, episode.idempotency_key)
            )
            if existing is not None and existing.status != EpisodeStatus.failed:
                duplicate = EpisodeResult(
                    episode_uuid=existing.uuid, group_id=group, status="duplicate",
                    summary=PlanSummary(),
                )  # fmt: skip
                results.append(duplicate)
                continue
            plan.replaces_failed = existing.uuid if existing is not None else None
            plan.base = base
            _record(plan.episode, summary)
            await self._embed(group, plan.new_edges, plan.new_entities, plan.episode)
            timelines.commit(plan)
            plans.append(plan)
            results.append(EpisodeResult(episode_uuid=plan.episode.uuid, group_id=group,
                                         status="added", summary=summary))  # fmt: skip
        if not plans:
            self._written[group] = base  # nothing written: still the version to plan at
            return results
        version, next_reads = await self.store.apply_many(plans, then)
        if then is not None and next_reads is not None:
            self._ahead[group] = (version.token, then, next_reads)
        self._written[group] = version
        return results

    async def _add(
        self, episode: Episode, *, extract: bool, then: PlanningNames | None = None
    ) -> EpisodeResult:
        """Plan and write one checked episode (see `check_episode`), again if another writer
        changed the group between this one's reads and its write (see kg.versioned).
        `then`: the planning read of the group's next (structured) episode, to make in this
        one's write (see `PlanningRead.apply_many`)."""
        raw = not extract and episode.source is not EpisodeSource.facts
        group = episode.group_id
        memo: dict[str, Any] = {}  # what the LLM said: kept when a conflict means re-planning
        async with self._writer(group):  # one writer per group in this process, then versions
            (result, plan), attempts = await retrying(
                self.store, self.clock, group,
                lambda base: self._attempt(episode, raw, base, memo, then),
                known=self._written.pop(group, None),
            )  # fmt: skip
            if plan is not None:
                await self._join_communities(plan)
        result.attempts = attempts
        return result

    async def _attempt(
        self,
        episode: Episode,
        raw: bool,
        base: GroupVersion,
        memo: dict[str, Any],
        then: PlanningNames | None = None,
    ) -> tuple[EpisodeResult, WritePlan | None]:
        """One attempt: read, plan and write at `base`. A structured episode's reads are one
        round trip (`PlanningRead`); the returned plan is None when no community join can
        follow (a duplicate, or a group that had no communities when it was read)."""
        group = episode.group_id
        reads = None
        if episode.source is EpisodeSource.facts:
            names = planning_names(episode, self.ontology)
            ahead = self._ahead.pop(group, None)
            if ahead is not None and ahead[0] == base.token and ahead[1] == names:
                reads = ahead[2]  # read inside the write that made `base` current
            else:
                reads = await self.store.planning_reads(group, names)
            existing = _first_episode(reads.episodes)
        else:
            existing = await self._existing(episode)
        if existing is not None and existing.status != EpisodeStatus.failed:
            duplicate = EpisodeResult(
                episode_uuid=existing.uuid,
                group_id=group,
                status="duplicate",
                summary=PlanSummary(),
            )
            self._written[group] = base  # nothing written: still the version to plan at
            return duplicate, None
        failed = existing.uuid if existing is not None else None
        untrusted = episode.channel in UNTRUSTED
        if reads is not None:
            plan, summary = await self._plan_structured(episode, new_uuid(), BatchTimelines(reads))
        elif raw:
            node = episodic_node(
                episode, uuid=new_uuid(), now=self.clock.now(), extractor=RAW_EXTRACTOR
            )
            node.extraction = extraction_record([])
            plan, summary = WritePlan(group_id=group, episode=node), PlanSummary()
            summary.quarantined = self.guards.passages(episode.content) if untrusted else []
        else:
            plan, summary = await self._plan_with_llm(episode, failed, base, memo)
        plan.replaces_failed = failed
        plan.base = base
        _record(plan.episode, summary)
        if plan.episode.status is EpisodeStatus.ingested:
            plan.episode.search_key = await key_for(self.store, plan.episode)
        await self._embed(group, plan.new_edges, plan.new_entities, plan.episode)
        if reads is not None and then is not None:
            version, next_reads = await self.store.apply_many([plan], then)
            if next_reads is not None:
                self._ahead[group] = (version.token, then, next_reads)
        else:
            version = await self.store.apply(plan)
        self._written[group] = version
        added = EpisodeResult(
            episode_uuid=plan.episode.uuid, group_id=group, status="added", summary=summary
        )
        return added, None if reads is not None and not reads.communities else plan

    async def _plan_structured(
        self,
        episode: Episode,
        uuid: str,
        timelines: Timelines | None = None,
        digest: str | None = None,
    ) -> tuple[WritePlan, PlanSummary]:
        """`timelines`: what to plan from (the store itself unless the reads were made);
        `digest`: the episode's content hash, if made."""
        untrusted = episode.channel in UNTRUSTED
        kept, held = (
            self.guards.split_facts(episode.facts) if untrusted else (list(episode.facts), [])
        )
        plan, summary = await plan_structured_episode(
            episode, timelines or self.store, self.ontology, self.clock.now(), facts=kept,
            uuid=uuid, digest=digest,
        )  # fmt: skip
        summary.quarantined = held
        return plan, summary

    async def _complete(
        self,
        node: EpisodicNode,
        owner: str,
        extraction: tuple[Extraction, list[LLMCall]] | None = None,
        answered: Answer | None = None,
    ) -> EpisodeResult:
        """Write a queued episode the worker `owner` holds: resolved and planned against the
        graph as it stands now, completing the stored node in place, and written only if
        the lease is still held (else LeaseLostError, nothing written) and nothing else wrote
        the group since the plan's reads (else re-planned, as `_add` does: see kg.versioned).
        kg.queue calls this in the group's order; the extraction came before, outside the
        writer lock, and so may a resolution reply (`answered`, see `_resolve_ahead`)."""
        group = node.group_id
        memo: dict[str, Any] = {}  # the resolved extraction: kept when a conflict re-plans
        async with self._writer(group):
            (result, plan), attempts = await retrying(
                self.store,
                self.clock,
                group,
                lambda base: self._complete_attempt(node, owner, extraction, answered, base, memo),
            )
            await self._join_communities(plan)
        result.attempts = attempts
        return result

    async def _complete_attempt(
        self,
        node: EpisodicNode,
        owner: str,
        extraction: tuple[Extraction, list[LLMCall]] | None,
        answered: Answer | None,
        base: GroupVersion,
        memo: dict[str, Any],
    ) -> tuple[EpisodeResult, WritePlan]:
        """One attempt of `_complete`: read, plan and write at `base`, under the lease."""
        episode = queued_episode(node)
        try:
            if node.source is EpisodeSource.facts:
                plan, summary = await self._plan_structured(episode, node.uuid)
            else:
                if extraction is None:
                    raise InputError(f"episode {node.uuid}: queued text without extraction")
                if "resolved" not in memo:
                    memo["resolved"] = await self._resolve_extraction(
                        episode, *extraction, answered=answered
                    )
                plan, summary = await self._plan_resolved(episode, node.uuid, memo["resolved"])
        except ValueError as exc:  # the ontology changed since it was queued
            raise InputError(str(exc)) from None
        ep = plan.episode
        ep.queued_at, ep.attempts = node.queued_at, node.attempts
        ep.idempotency_key, ep.session_id = node.idempotency_key, node.session_id
        ep.failure_reasons = node.failure_reasons
        plan.lease_owner = owner
        plan.base = base
        _record(ep, summary)
        ep.llm_calls += node.llm_calls  # spent by failed attempts before this one
        ep.llm_tokens += node.llm_tokens
        ep.search_key = await key_for(self.store, ep)  # now with its facts

        # The content was embedded when it was queued; the key changed.
        await self._embed(node.group_id, plan.new_edges, plan.new_entities, ep, content=False)
        await self.store.apply(plan)
        done = EpisodeResult(episode_uuid=node.uuid, group_id=node.group_id, status="added",
                             summary=summary)  # fmt: skip
        return done, plan

    async def _extraction_context(self, node: EpisodicNode) -> list[EpisodicNode]:
        """The episodes before a queued one in the group's order, as a one-by-one ingest
        would give its extraction call."""
        return await self.store.context_before(node.group_id, node, self.context_episodes)

    async def _extract_queued(
        self, node: EpisodicNode, context: list[EpisodicNode] | None = None
    ) -> tuple[Extraction, list[LLMCall]]:
        """The extraction call for a queued episode; raises LLMError."""
        if self.llm is None:
            raise LLMRequiredError("this worker has no LLM to extract text episodes")
        if context is None:
            context = await self._extraction_context(node)
        return await extract(self.llm, queued_episode(node), self.ontology, context)

    async def rollback(
        self, episode_ids: str | list[str], *, group_id: str = "default", apply: bool = False
    ) -> RollbackReport:
        """Plan (and with `apply=True` carry out, atomically) undoing episodes; see kg.rollback."""
        ids = [episode_ids] if isinstance(episode_ids, str) else list(episode_ids)
        ids = [_text("episode id", i) for i in ids]
        if not ids:
            raise InputError("rollback needs at least one episode id")
        self._check_group(group_id)

        async def attempt(base: GroupVersion) -> RollbackReport:
            plan, report = await plan_rollback(
                self.store, self.ontology, group_id, ids, self.clock.now()
            )
            if apply and not report.noop:
                plan.base = base
                # A rolled-back episode is never searched: its key needs no embedding.
                live = [k for k in plan.rekey if k.uuid not in plan.rolled_back]
                await self._embed(group_id, plan.new_edges, keys=live)
                await self.store.rewrite(plan)
                report.applied = True
            return report

        async with self._writer(group_id):
            report, _ = await retrying(self.store, self.clock, group_id, attempt)
            if report.applied:
                await self._refresh_communities(group_id, removed=report.episodes)
        return report

    async def rollback_source(
        self,
        source_description: str,
        *,
        since: datetime | None = None,
        group_id: str = "default",
        apply: bool = False,
    ) -> RollbackReport:
        """Undo every episode from one source (e.g. a web page), optionally since T: the
        ingested ones, and those still queued, leased or failed (cancelled)."""
        self._check_group(group_id)
        source_description = _text("source_description", source_description)
        since = _when("since", since)
        found = await self.store.find_episodes(
            group_id, source_description, since, include_rolled_back=True
        )
        episodes = [e for e in found if e.status is EpisodeStatus.ingested or e.status in UNWRITTEN]
        if not episodes:
            return RollbackReport(group_id=group_id, episodes=[])
        return await self.rollback([e.uuid for e in episodes], group_id=group_id, apply=apply)

    async def replay(self, *, group_id: str = "default", apply: bool = False) -> ReplayReport:
        """Rebuild the group from its episode log (e.g. after an ontology change) and compare;
        with `apply=True`, replace the live timelines with the rebuilt ones, atomically."""
        self._check_group(group_id)

        async def attempt(base: GroupVersion) -> ReplayReport:
            plan, report = await plan_replay(self.store, self.ontology, group_id)
            if apply and not report.identical:
                plan.base = base
                await self._embed(group_id, plan.new_edges)
                await self.store.rewrite(plan)
                report.applied = True
            return report

        async with self._writer(group_id):
            report, _ = await retrying(self.store, self.clock, group_id, attempt)
            if report.applied:
                await self._refresh_communities(group_id)
        return report

    async def why(self, fact_id: str, *, group_id: str = "default") -> Explanation:
        """Every version of a fact and the episodes that created, reinforced and closed it."""
        self._check_group(group_id)
        versions = await self.store.fact_versions(group_id, _text("fact id", fact_id))
        if not versions:
            raise NotFoundError(f"no fact or fact version {fact_id!r} in group {group_id!r}")
        ids = {ep for v in versions for ep in v.edge.episodes}
        ids |= {v.edge.invalidated_by for v in versions if v.edge.invalidated_by}
        episodes = await self.store.episodes(group_id, sorted(ids))
        return Explanation(versions=versions, episodes=episodes)

    async def log(
        self, *, group_id: str = "default", limit: int = 100, closures: bool = True
    ) -> list[AuditEvent]:
        """Rollbacks, erasures and (derived from the versions themselves) closures, newest first."""
        self._check_group(group_id)
        _limit(limit, 10_000)
        events = await self.store.audit_log(group_id, limit)
        if closures:
            for f in await self.store.closures(group_id, limit):
                e = f.edge
                until = e.invalid_at.isoformat() if e.invalid_at else "?"
                events.append(AuditEvent(
                    uuid=e.uuid, group_id=group_id, kind="closure", created_at=e.created_at,
                    episodes=[e.invalidated_by or ""],
                    detail=f"{f.subject} {f.predicate} {f.object}: true until {until}"
                    + (f" ({e.invalidation_reason})" if e.invalidation_reason else ""),
                ))  # fmt: skip
        return sorted(events, key=lambda ev: ev.created_at, reverse=True)[:limit]

    async def erase_entity(
        self,
        name: str,
        *,
        group_id: str = "default",
        dry_run: bool = False,
        keep_others: bool = False,
    ) -> ErasureReceipt:
        """Physically delete a subject: its episodes (queued ones too), facts, entity, and
        their traces on disk. Run again after a crash, it finishes what the crash interrupted.

        Args:
            dry_run: Erase nothing; the receipt says what would go, including the facts about
                other subjects that go with the subject's episodes (`other_facts_removed`).
            keep_others: Keep those facts, re-asserted from a redacted copy of each episode
                (the subject's name cut out; the copy's name says what it copies).
        """
        self._check_group(group_id)
        name = _text("entity name", name)
        async with self._writer(group_id):
            receipt, _ = await retrying(
                self.store,
                self.clock,
                group_id,
                lambda base: erase_entity(
                    self.store,
                    self.ontology,
                    group_id,
                    name,
                    self.clock.now(),
                    embed=partial(self._embed_rewrite, group_id),
                    base=base,
                    dry_run=dry_run,
                    keep_others=keep_others,
                ),
            )
            if receipt.communities_deleted and not receipt.dry_run:
                await self._build_communities(group_id)
            return receipt

    async def finish_erasures(self) -> list[ErasureReceipt]:
        """Finish erasures a crash interrupted (run by `open`): each is recorded before
        anything is deleted and cleared only once the files are compacted."""
        receipts = []
        for record in await self.store.pending_erasures():
            async with self._writer(record.group_id):
                receipt = await finish_erasure(
                    self.store, self.ontology, record, self.clock.now(),
                    embed=partial(self._embed_rewrite, record.group_id),
                )  # fmt: skip
            log.warning("finished an interrupted erasure in group %r; files compacted at %s",
                        receipt.group_id, receipt.compacted_at)  # fmt: skip
            receipts.append(receipt)
        return receipts

    async def erase_group(self, group_id: str) -> ErasureReceipt:
        """Physically delete a whole group, and compact the store's files."""
        self._check_group(group_id)
        async with self._writer(group_id):
            self._models.pop(group_id, None)  # its embedding model goes with it
            return await erase_group(self.store, group_id, self.clock.now())

    # -- graphiti-core graphs --------------------------------------------------------------

    async def adopt_graphiti(self, group_id: str = "default") -> AdoptReport:
        """Give a group written by graphiti-core kg's keys, copy-on-close versions and
        replayable records (see kg.graphiti), then rebuild it by replay. Idempotent."""
        self._check_group(group_id)
        if not await self.store.has_group(group_id):
            raise InputError(f"no group {group_id!r} to adopt")

        async def attempt(base: GroupVersion) -> AdoptReport:
            # Patches and the replay chain their versions: a writer that cuts in restarts the
            # whole adoption, which is idempotent.
            entities, episodes, edges, report = await plan_adoption(
                self.store, self.ontology, group_id
            )
            if report.already_adopted:
                return report
            for items in (entities, episodes, edges):
                for i in range(0, len(items), 500):
                    base = await self.store.patch(group_id, items[i : i + 500], base=base)
            plan, replay = await plan_replay(self.store, self.ontology, group_id)
            if not replay.identical:
                plan.base = base
                await self._embed(group_id, plan.new_edges)
                await self.store.rewrite(plan)
            report.versions_created = replay.versions_created
            report.versions_deleted = replay.versions_deleted
            return report

        async with self._writer(group_id):
            report, _ = await retrying(self.store, self.clock, group_id, attempt)
        return report

    # -- export and import ----------------------------------------------------------------

    def export_lines(self, group_id: str = "default", *, embeddings: bool = True
                     ) -> AsyncIterator[str]:  # fmt: skip
        """The group as JSON Lines (see kg.transfer): every version, uuid, time and vector."""
        self._check_group(group_id)
        return export_lines(self.store, group_id, embeddings=embeddings)

    async def import_lines(
        self, lines: Iterable[str], *, into: str | None = None, source: str = "<input>"
    ) -> TransferReport:
        """Load an export into a new group; a bad or truncated file leaves nothing behind."""
        async with self._writer(into or "\0import"):
            return await import_lines(self.store, lines, into=into, source=source)

    # -- communities ----------------------------------------------------------------------

    async def build_communities(
        self, group_id: str = "default", *, max_iterations: int = MAX_ITERATIONS
    ) -> CommunityReport:
        """Cluster the facts true now (label propagation) and summarise each community: with
        the LLM when kg has one (one call per changed community), else extractively.
        Unchanged clusters keep their summary, so a rebuild costs only what changed."""
        self._check_group(group_id)
        if not 1 <= max_iterations <= 1000:
            raise InputError(f"max_iterations must be in 1..1000, got {max_iterations}")
        async with self._writer(group_id):
            return await self._build_communities(group_id, max_iterations=max_iterations)

    async def communities(self, group_id: str = "default") -> list[Community]:
        self._check_group(group_id)
        return await self.store.communities(group_id)

    async def _build_communities(
        self, group_id: str, *, removed: Sequence[str] = (), max_iterations: int = MAX_ITERATIONS
    ) -> CommunityReport:
        # Summaries by cluster fingerprint, kept across attempts: a conflict re-plans the
        # clusters but asks the LLM again only about clusters it has not summarised yet.
        done: dict[str, tuple[Any, str]] = {}
        calls: list[Any] = []
        errors: list[str] = []

        async def attempt(base: GroupVersion) -> CommunityReport:
            now = self.clock.now()
            existing = await self.store.communities(group_id)
            current = await self.store.facts(
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
            summaries, more, errs = await summarize(fresh, names, self.llm)
            done.update(zip((c.fingerprint for c in fresh), summaries, strict=True))
            calls.extend(more)
            errors.extend(errs)
            plan.create, plan.members = community_nodes(
                group_id, todo, [done[c.fingerprint] for c in todo], now, new_uuid
            )
            texts = [f"{c.name}: {c.summary}"[:EPISODE_EMBED_CHARS] for c in plan.create]
            vectors = await self._vectors(group_id, texts)
            for c, v in zip(plan.create, vectors or [], strict=bool(vectors)):
                c.name_embedding = v
            if await self.store.has_group(group_id):
                plan.base = base
                await self.store.write_communities(plan)
            return CommunityReport(
                group_id=group_id, communities=len(found), kept=len(found) - len(todo),
                summarized=len(todo), deleted=len(plan.delete), llm_calls=len(calls),
                prompt_tokens=sum(c.prompt_tokens for c in calls),
                completion_tokens=sum(c.completion_tokens for c in calls), errors=errors,
            )  # fmt: skip

        report, _ = await retrying(self.store, self.clock, group_id, attempt)
        return report

    async def _refresh_communities(self, group_id: str, removed: Sequence[str] = ()) -> None:
        """After a rollback, replay or erasure: rebuild if the group has communities."""
        if await self.store.communities(group_id):
            await self._build_communities(group_id, removed=list(removed))

    async def _join_communities(self, plan: WritePlan) -> None:
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

    async def _embedder_for(self, group_id: str) -> Embedder | None:
        """kg's embedder, once checked against the model on record for the group: vectors of
        two models do not compare, so a group embedded by another model is refused."""
        if self.embedder is not None and group_id not in self._models:
            recorded = await self.store.embedding_model(group_id)
            self._check_model(group_id, recorded)
            self._models[group_id] = recorded
        return self.embedder

    def _check_model(self, group_id: str, recorded: EmbeddingModel | None) -> None:
        if recorded is None or self.embedder is None:
            return
        given = EmbeddingModel.of(self.embedder)
        if given != recorded:
            raise InputError(
                f"group {group_id!r} was embedded with {recorded}, not with the embedder "
                f"given, {given}: open kg with the recorded model (CLI: --embedder auto)"
            )

    async def _vectors(self, group_id: str, texts: list[str]) -> list[list[float]] | None:
        """Embeddings for `texts` (None without an embedder). The group's first embedded
        write records the model, just before that write."""
        embedder = await self._embedder_for(group_id)
        if embedder is None or not texts:
            return None
        vectors = await embedder.embed(texts)
        if self._models.get(group_id) is None:
            stored = await self.store.record_embedding_model(group_id, EmbeddingModel.of(embedder))
            self._check_model(group_id, stored)  # another process may have recorded first
            self._models[group_id] = stored
        return vectors

    async def _embed(
        self,
        group_id: str,
        edges: list[FactEdge],
        entities: list[EntityNode] | None = None,
        episode: EpisodicNode | None = None,
        *,
        content: bool = True,
        keys: Sequence[EpisodeKey] = (),
    ) -> None:
        """Fill in missing embeddings, one batched call (rewritten versions included): an
        episode's content (unless `content` is False) and search key, and rebuilt keys."""
        if self.embedder is None:
            return
        todo_edges = [e for e in edges if e.fact_embedding is None]
        todo_entities = [n for n in entities or [] if n.name_embedding is None]
        # Structured episodes' content is their facts as JSON: the facts carry the meaning.
        ep_text = key_text = None
        if (
            episode is not None
            and episode.source is not EpisodeSource.facts
            and episode.status in (EpisodeStatus.ingested, EpisodeStatus.queued)
        ):
            ep_text = episode.content[:EPISODE_EMBED_CHARS] if content else None
            key_text = (episode.search_key or "")[:EPISODE_EMBED_CHARS] or None
        todo_keys = [k for k in keys if k.key_embedding is None]
        texts = [e.fact for e in todo_edges] + [n.name for n in todo_entities]
        texts += [t for t in (ep_text, key_text) if t]
        texts += [k.search_key[:EPISODE_EMBED_CHARS] for k in todo_keys]
        texts = list(dict.fromkeys(texts))
        embedded = await self._vectors(group_id, texts)
        if embedded is None:
            return
        vectors = dict(zip(texts, embedded, strict=True))
        for e in todo_edges:
            e.fact_embedding = vectors[e.fact]
        for n in todo_entities:
            n.name_embedding = vectors[n.name]
        if episode is not None and ep_text:
            episode.content_embedding = vectors[ep_text]
        if episode is not None and key_text:
            episode.key_embedding = vectors[key_text]
        for k in todo_keys:
            k.key_embedding = vectors[k.search_key[:EPISODE_EMBED_CHARS]]

    async def _embed_rewrite(
        self, group_id: str, edges: list[FactEdge], keys: list[EpisodeKey]
    ) -> None:
        """An erasure's embeddings: its rewritten versions and its rebuilt keys."""
        await self._embed(group_id, edges, keys=keys)

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
        self, episode: Episode, failed: str | None, base: GroupVersion, memo: dict[str, Any]
    ) -> tuple[WritePlan, PlanSummary]:
        """Extract and resolve once (`memo` keeps the outcome across attempts: a conflict
        re-plans the resolved facts on fresh reads, it never asks the LLM again)."""
        assert self.llm is not None
        if "resolved" not in memo and "error" not in memo:
            context = await self.store.recent_episodes(episode.group_id, self.context_episodes)
            try:
                extraction, calls = await extract(self.llm, episode, self.ontology, context)
            except LLMError as exc:
                memo["error"] = exc
            else:
                memo["resolved"] = await self._resolve_extraction(episode, extraction, calls)
        if (error := memo.get("error")) is not None:
            # Record the attempt (retryable: re-adding the episode tries again), write no facts.
            node = episodic_node(
                episode, uuid=new_uuid(), now=self.clock.now(), extractor=LLM_EXTRACTOR
            )
            node.status, node.error = EpisodeStatus.failed, str(error)
            spent = list(getattr(error, "calls", []))
            node.llm_calls = len(spent)
            node.llm_tokens = sum(c.prompt_tokens + c.completion_tokens for c in spent)
            await self.store.apply(
                WritePlan(
                    group_id=episode.group_id, episode=node, replaces_failed=failed, base=base
                )
            )
            raise ExtractionError(
                f"extraction failed, episode recorded as failed: {error}"
            ) from error
        return await self._plan_resolved(episode, new_uuid(), memo["resolved"])

    async def _resolution_question(
        self, node: EpisodicNode, extraction: tuple[Extraction, list[LLMCall]]
    ) -> Question | None:
        """An extracted queued episode's resolution question, against the graph as it stands
        (kg.queue asks it while earlier episodes are being written; the episode's turn uses
        the reply if the graph then asks the same: see kg.ingest.resolution.question). None
        if there is nothing to ask, or if the episode's budget leaves no call for asking
        again in turn."""
        if len(extraction[1]) + 2 > LLM_CALLS_PER_EPISODE:
            return None
        episode = queued_episode(node)
        facts, _, _ = vet(extraction[0], episode, self.ontology, self.guards)
        return await question(
            facts,
            group_id=episode.group_id,
            store=self.store,
            ontology=self.ontology,
            now=self.clock.now(),
            embedder=await self._embedder_for(episode.group_id),
        )

    async def _resolve_extraction(
        self,
        episode: Episode,
        extraction: Extraction,
        calls: list[LLMCall],
        answered: Answer | None = None,
    ) -> Resolved:
        """Vet and resolve an extracted episode: what its plans (one per attempt) are made of."""
        assert self.llm is not None
        spent = len(calls) + (len(answered.calls) if answered is not None else 0)
        facts, drops, held = vet(extraction, episode, self.ontology, self.guards)
        extracted = len(facts)
        facts, resolution, more = await resolve(
            facts,
            group_id=episode.group_id,
            store=self.store,
            ontology=self.ontology,
            llm=self.llm,
            now=self.clock.now(),
            reference_time=episode.reference_time,
            embedder=await self._embedder_for(episode.group_id),
            max_attempts=min(2, LLM_CALLS_PER_EPISODE - spent),
            answered=answered,
        )
        return facts, drops, held, extracted, resolution, [*calls, *more]

    async def _plan_resolved(
        self, episode: Episode, uuid: str, resolved: Resolved
    ) -> tuple[WritePlan, PlanSummary]:
        """Plan resolved facts against the graph as it stands now."""
        facts, drops, held, extracted, resolution, calls = resolved
        now = self.clock.now()
        node = episodic_node(episode, uuid=uuid, now=now, extractor=LLM_EXTRACTOR)
        node.extraction = extraction_record(facts)  # resolved: replay needs no LLM
        node.facts_extracted = extracted
        plan, summary = await plan_facts(node, facts, self.store, self.ontology, now)
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
        valid_at, known_at = _when("valid_at", valid_at), _when("known_at", known_at)
        now = self.clock.now()
        try:
            query = FactQuery(
                group_id=group_id,
                valid_at=valid_at or now,
                known_at=known_at or now,
                subject_key=name_key(_text("subject", subject)) if subject is not None else None,
                predicate=self._predicate(predicate),
                object_key=name_key(_text("object", object)) if object is not None else None,
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
        _limit(limit, 100_000)
        return await self.store.history(
            group_id,
            name_key(_text("subject", subject)) if subject is not None else None,
            self._predicate(predicate),
            name_key(_text("object", object)) if object is not None else None,
            limit,
        )

    async def entities(
        self, *, group_id: str = "default", contains: str = "", limit: int = 100
    ) -> list[EntitySummary]:
        """Entities whose normalised name contains `contains` (all for ''), the most-described
        subjects first: what a person picks a subject from."""
        self._check_group(group_id)
        _limit(limit, 10_000)
        key = name_key(_text("contains", contains)) if contains else ""
        return await self.store.entities(group_id, key, limit)

    async def stats(self, group_id: str = "default") -> StoreStats:
        self._check_group(group_id)
        return await self.store.stats(group_id, self.clock.now())

    async def quarantine(self, group_id: str = "default") -> list[QuarantineEntry]:
        """What the instruction guard held back from untrusted channels, oldest first: facts
        that were never written and passages that `context()` withholds, each with its reason.
        Nothing here is a memory; re-send a fact through the user channel to keep it."""
        self._check_group(group_id)
        if group_id not in await self.store.groups():
            return []
        return [
            QuarantineEntry(episode_uuid=ep.uuid, created_at=ep.created_at, channel=ep.channel,
                            source_description=ep.source_description, item=q)
            for ep in await self.store.find_episodes(group_id, None, None)
            for q in ep.quarantined()
        ]  # fmt: skip

    async def groups(self) -> list[str]:
        return await self.store.groups()

    # -- search ---------------------------------------------------------------------------

    async def search(
        self,
        query: str,
        *,
        group_id: str = "default",
        recipe: str | None = None,
        config: SearchConfig | None = None,
        limit: int | None = None,
        valid_at: datetime | None = None,
        known_at: datetime | None = None,
        include_history: bool = False,
        include_contested: bool = False,
        center: str | None = None,
        seeds: list[str] | None = None,
        min_score: float | None = None,
        abstain_below: float | None = None,
        asked_at: datetime | None = None,
    ) -> SearchResults:
        """Hybrid search: BM25, cosine and BFS branches, fused (scores or RRF), then reranked.

        Default view: facts true now and still believed. `valid_at` / `known_at` give any
        as-of view; `include_history` also returns closed facts, marked `closed`. Pick a
        named `recipe` (see `retrieval.RECIPES`; the default, facts_hybrid, is BM25 + cosine
        over facts, score-fused; facts_hybrid_bfs_rrf adds BFS) or pass a `config`. `center` and
        `seeds` are entity names (node distance, BFS). `abstain_below` leaves a scope empty
        when its best cosine similarity is below it (see `SearchConfig.abstain_below`).

        Time words in the query ("in 2022", "last March", "작년 3월") are read against
        `asked_at` (default: `valid_at`, else now) as a window: facts must be valid in it
        (closed ones included, marked), episodes in it rank higher; `results.time` says how
        they were read. Facts rank by their trust tier (an agent's inference below the user's
        word unless the user restated it) and by the ontology's recency decay, if declared.
        """
        self._check_group(group_id)
        if not _text("query", query).strip():
            raise InputError("search needs a non-empty query")
        cfg = self._search_config(recipe, config, limit, min_score, abstain_below)
        valid_at, known_at = _when("valid_at", valid_at), _when("known_at", known_at)
        asked_at = _when("asked_at", asked_at)
        now = self.clock.now()
        view = SearchView(valid_at=valid_at or now, known_at=known_at or now,
                          include_history=include_history,
                          include_contested=include_contested)  # fmt: skip
        center_uuid = (await self._entity_uuids(group_id, [center]))[0] if center else None
        seed_uuids = await self._entity_uuids(group_id, seeds or [])
        # The group's own model first: its mismatch is the more precise error than a store
        # whose vector indexes have another dimension (one Neo4j database, many groups).
        embedder = await self._embedder_for(group_id)
        await self._search_schema(group_id)
        try:
            results = await _search(
                self.store,
                group_id,
                query,
                cfg,
                view,
                embedder=embedder,
                cross_encoder=self.cross_encoder,
                center=center_uuid,
                seeds=seed_uuids,
                asked_at=asked_at,
                ontology=self.ontology,
            )
        except SearchError as exc:
            raise InputError(str(exc)) from None
        self._observe(results)
        return results

    async def context(
        self,
        query: str,
        *,
        max_tokens: int = 1000,
        group_id: str = "default",
        recipe: str | None = None,
        config: SearchConfig | None = None,
        limit: int | None = None,
        valid_at: datetime | None = None,
        known_at: datetime | None = None,
        include_history: bool = False,
        include_contested: bool = False,
        center: str | None = None,
        seeds: list[str] | None = None,
        min_score: float | None = None,
        abstain_below: float | None = None,
        asked_at: datetime | None = None,
    ) -> str:
        """`search` with the same arguments, then the hits rendered as a quoted-data block for
        a prompt, within `max_tokens` (a hit that would overflow it is left out whole)."""
        results = await self.search(
            query,
            group_id=group_id,
            recipe=recipe,
            config=config,
            limit=limit,
            valid_at=valid_at,
            known_at=known_at,
            include_history=include_history,
            include_contested=include_contested,
            center=center,
            seeds=seeds,
            min_score=min_score,
            abstain_below=abstain_below,
            asked_at=asked_at,
        )
        block = _render_context(results, max_tokens=max_tokens)
        group = results.group_id
        self._queries[group] = self._queries[group].merged(
            QueryMetrics(contexts=1, context_tokens=approx_tokens(block))
        )
        return block

    @staticmethod
    def _search_config(
        recipe: str | None, config: SearchConfig | None, limit: int | None,
        min_score: float | None, abstain_below: float | None = None,
    ) -> SearchConfig:  # fmt: skip
        if recipe is not None and config is not None:
            raise InputError("give a recipe or a config, not both")
        if config is None:
            name = recipe or DEFAULT_RECIPE
            if name not in RECIPES:
                raise InputError(f"unknown recipe {name!r}; known: {', '.join(sorted(RECIPES))}")
            config = RECIPES[name]
        update: dict[str, Any] = {}
        if min_score is not None:
            if not math.isfinite(min_score):
                raise InputError(f"min_score must be a finite number, got {min_score!r}")
            update["min_score"] = min_score
        if abstain_below is not None:
            if not -1.0 <= abstain_below <= 1.0:
                raise InputError(f"abstain_below is a cosine similarity, in -1..1: {abstain_below}")
            update["abstain_below"] = abstain_below
        if limit is not None:
            if not 1 <= limit <= 1000:
                raise InputError(f"limit must be in 1..1000, got {limit}")
            for scope in ("facts", "entities", "episodes", "communities"):
                sc = getattr(config, scope)
                if sc is not None:
                    update[scope] = sc.model_copy(update={"limit": limit})
        return config.model_copy(update=update) if update else config

    async def _entity_uuids(self, group_id: str, names: list[str]) -> list[str]:
        if not names:
            return []
        names = [_text("entity name", n) for n in names]
        found = {e.name_key: e.uuid for e in await self.store.entities_by_key(
            group_id, [name_key(n) for n in names])}  # fmt: skip
        missing = [n for n in names if name_key(n) not in found]
        if missing:
            raise InputError(f"no entity named {missing[0]!r} in group {group_id!r}")
        return [found[name_key(n)] for n in names]

    async def _search_schema(self, group_id: str) -> None:
        """An existing group opened with a new embedder gets its vector indexes before the
        first search, not only at the next write."""
        if group_id in self._searchable:
            return
        if await self.store.has_group(group_id):
            await self.store.ensure_schema(group_id)
            self._searchable.add(group_id)
