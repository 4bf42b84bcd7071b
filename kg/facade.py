"""The public async API: `KG`.

```
async with await KG.open() as kg:                # embedded FalkorDB under KG_HOME
    await kg.add_episode(source="facts", reference_time=now, facts=[...])
    await kg.facts(subject="Alice", valid_at=march)   # what was true in March
```
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from kg.arguments import (
    EPISODE_FIELDS,
    ChannelName,
    IdKind,
    SourceName,
    context_request,
    dry_run_of,
    episode_of,
    request_of,
    resolve_id,
    search_request,
)
from kg.communities import CommunityReport, rebuild_communities
from kg.erasure import ErasureReceipt, erase_entity, erase_group, finish_erasure
from kg.errors import InputError, KGError, NotFoundError, check_group
from kg.graphiti import AdoptReport, plan_adoption
from kg.ingest import name_key
from kg.ingest.communities import MAX_ITERATIONS
from kg.ingest.extraction import Guards
from kg.ingest.llm import StructuredLLM
from kg.pipeline import BulkResult, EpisodeResult, Pipeline
from kg.retrieval import CrossEncoder, SearchConfig, SearchResults
from kg.retrieval import render_context as _render_context
from kg.retrieval.config import DEFAULT_RECIPE_WITHOUT_LLM
from kg.retrieval.context import approx_tokens
from kg.retrieval.request import ContextRequest, SearchRequest
from kg.review import ReviewItem, review_queue
from kg.rollback import UNWRITTEN, ReplayReport, RollbackReport, plan_replay, plan_rollback
from kg.schemas.answers import Explanation, QuarantineEntry
from kg.schemas.embedder import Embedder
from kg.schemas.episode import Channel, Episode, EpisodeSource, StructuredFact, TrustTier
from kg.schemas.graph import AuditEvent, EpisodeStatus, Fact
from kg.schemas.metrics import (
    ApiMetrics,
    CallKind,
    IngestMetrics,
    Metrics,
    QueryMetrics,
    valid_call_name,
)
from kg.schemas.names import deprecated
from kg.schemas.ontology import DEFAULT_ONTOLOGY, Ontology
from kg.schemas.plan import GroupVersion
from kg.schemas.requests import (
    AddEpisodeRequest,
    EntitiesRequest,
    EraseEntityRequest,
    EraseGroupRequest,
    FactsRequest,
    HistoryRequest,
    LogRequest,
    ReviewRequest,
    RollbackRequest,
)
from kg.schemas.store import Community, EntitySummary, FactQuery, GraphStore, StoreStats
from kg.searcher import Searcher
from kg.store import open_store
from kg.store.falkordb.embedded import Durability, ProgressCallback
from kg.times import TransactionClock
from kg.transfer import TransferReport, export_lines, import_lines
from kg.vectors import recorded_embedder_for
from kg.versioned import retrying

__all__ = ["KG", "BulkResult", "CommunityReport", "EpisodeResult", "Explanation", "QuarantineEntry"]
log = logging.getLogger("kg")


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
        group_id: str = "default",
    ) -> None:
        self.group_id = check_group(group_id)  # what every method reads and writes by default
        self.pipeline = Pipeline(
            store,
            ontology=ontology,
            clock=clock or TransactionClock(),
            llm=llm,
            guards=guards or Guards(),
            context_episodes=context_episodes,
            embedder=embedder,
        )
        self.searcher = Searcher(
            store,
            vectors=self.pipeline.vectors,
            ontology=ontology,
            clock=self.pipeline.clock,
            cross_encoder=cross_encoder,
        )
        self._queries: dict[str, QueryMetrics] = {}  # not yet persisted, per group
        self._api: dict[str, ApiMetrics] = {}  # API calls (kg serve, MCP), not yet persisted

    def _group(self, group_id: str | None) -> str:
        """The group a call names, else the one kg was opened with; checked."""
        return check_group(self.group_id if group_id is None else group_id)

    # What kg was opened with, read-only: the pipeline's and the searcher's.

    @property
    def store(self) -> GraphStore:
        return self.pipeline.store

    @property
    def ontology(self) -> Ontology:
        return self.pipeline.ontology

    @property
    def clock(self) -> TransactionClock:
        return self.pipeline.clock

    @property
    def llm(self) -> StructuredLLM | None:
        return self.pipeline.llm

    @property
    def guards(self) -> Guards:
        return self.pipeline.guards

    @property
    def context_episodes(self) -> int:
        return self.pipeline.context_episodes

    @property
    def embedder(self) -> Embedder | None:
        return self.pipeline.embedder

    @property
    def cross_encoder(self) -> CrossEncoder | None:
        return self.searcher.cross_encoder

    @property
    def enqueue_listeners(self) -> list[Callable[[str], None]]:
        return self.pipeline.enqueue_listeners

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
        attach: bool = False,
        stores: str | None = None,
        placement: str | None = None,
    ) -> KG:
        """Open a store by URI (embedded FalkorDB by default).

        With an `embedder`, facts, entity names and episodes get embeddings and the store gets
        vector indexes of its dimension. A group's first embedded write records the model
        (name and dimension); a group embedded by another model is refused. `embedder="auto"`
        loads the model recorded for `group_id` when it can be loaded here (the packaged
        MiniLM, or a sentence-transformers model at a local path), else runs without (logged).
        A `cross_encoder` enables the cross-encoder reranker. `progress` is called while the
        embedded store loads its data (a large store takes a while). `group_id` is the group
        every method reads and writes unless a call names another. With `attach`, an
        embedded data directory a live kg process holds (`kg serve`) is shared through that
        process's server instead of refused (`DataDirLockedError`); `store.owner_pid` then
        names the owner, and closing leaves its server running. `stores` and `placement`
        (KG_STORES, KG_PLACEMENT) open a deployment on several store servers instead of
        `uri`: each group on the one the placement table names (kg.store.placed).
        """
        check_group(group_id)
        if embedder == "auto":
            store = await open_store(
                uri,
                home=home,
                durability=durability,
                progress=progress,
                attach=attach,
                stores=stores,
                placement=placement,
            )
            try:
                embedder = await recorded_embedder_for(store, group_id)
            except BaseException:
                await store.close()
                raise
            if embedder is None:
                return await cls(
                    store,
                    ontology=ontology,
                    llm=llm,
                    guards=guards,
                    cross_encoder=cross_encoder,
                    group_id=group_id,
                )._opened()
            await store.close()  # reopened below, with vector indexes of the model's dimension
        dim = embedder.dim if embedder is not None else None
        store = await open_store(
            uri,
            home=home,
            durability=durability,
            embedding_dim=dim,
            progress=progress,
            attach=attach,
            stores=stores,
            placement=placement,
        )
        return await cls(
            store,
            ontology=ontology,
            llm=llm,
            guards=guards,
            embedder=embedder,
            cross_encoder=cross_encoder,
            group_id=group_id,
        )._opened()

    async def _opened(self) -> Self:
        """What `open` does once the store is up: finish erasures a crash interrupted. An
        attached store's owner did that when it opened, and may be running one now."""
        if getattr(self.store, "owner_pid", None) is not None:
            return self
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

    async def metrics(self, group_id: str | None = None) -> Metrics:
        """Ingest metrics (summed over stored episodes) and query metrics (stored + unflushed)."""
        group_id = self._group(group_id)
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
            zero_result_queries=int(
                not (results.facts or results.entities or results.episodes or results.communities)
            ),
            branch_errors=sum(1 for b in results.branches if b.error),
            latency_ms_total=results.latency_ms,
            branch_hits={
                k: b.hits
                for b in results.branches
                if (k := QueryMetrics.branch_key(b.scope.value, b.method))
            },
        )
        self._queries[results.group_id] = self._queries.get(
            results.group_id, QueryMetrics()
        ).merged(m)

    # -- writes ---------------------------------------------------------------------------

    async def add_episode(
        self,
        episode: Episode | AddEpisodeRequest | None = None,
        /,
        *,
        source: EpisodeSource | SourceName | None = None,
        reference_time: datetime | str | None = None,
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

        Pass an `Episode` or an `AddEpisodeRequest` (what the server takes: its `extract`
        and `wait` too), or their fields as keywords (not both):

        Args:
            source: "facts" (structured, no LLM), or "message", "text", "json" (extracted by
                the LLM kg was opened with).
            reference_time: When it happened (default now; a datetime or "2024-03-01..."):
                its facts' default valid time, the anchor of relative times in its text.
            content: The text of a message, text or JSON episode.
            facts: The statements of a "facts" episode: `StructuredFact`s or dicts with
                subject, predicate, object and optional valid_at, invalid_at, fact.
            group_id: The group (tenant) it belongs to; default the one kg was opened with.
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
        fields = {k: v for k, v in locals().items() if k in EPISODE_FIELDS and v is not None}
        if isinstance(episode, AddEpisodeRequest):
            if fields or not (extract and wait):
                raise TypeError("pass either an AddEpisodeRequest or keyword fields, not both")
            episode, extract, wait = self._episode_of(episode)
        if episode is None:
            episode = episode_of({"group_id": self.group_id, **fields}, "invalid episode")
        elif fields:
            raise TypeError("pass either an Episode or keyword fields, not both")
        else:
            episode = self._in_group(episode)
        if after_seconds is not None and (wait or not 0 < after_seconds <= 86_400):
            raise InputError("after_seconds needs wait=False and a value in (0, 86400]")
        queue = not wait and self.pipeline.queues(episode, extract=extract)
        self.check_episode(episode, extract=extract, queued=queue)
        if queue:
            return await self.pipeline.enqueue(episode, after_seconds=after_seconds)
        return await self.pipeline.add(episode, extract=extract)

    def _episode_of(self, request: AddEpisodeRequest) -> tuple[Episode, bool, bool]:
        """The episode an `AddEpisodeRequest` asks for, in the group kg was opened with, and
        whether to extract it (its `extract`, else: when kg has an LLM) and wait."""
        given = request.model_dump(exclude={"extract", "wait"}, exclude_none=True)
        episode = episode_of({"group_id": self.group_id, **given}, "invalid episode")
        extract = request.extract if request.extract is not None else self.llm is not None
        return episode, extract, request.wait

    def _in_group(self, episode: Episode) -> Episode:
        """An Episode built without a group goes to the group kg was opened with."""
        if "group_id" in episode.model_fields_set:
            return episode
        return episode.model_copy(update={"group_id": self.group_id})

    def check_episode(
        self, episode: Episode, *, extract: bool = True, queued: bool = False
    ) -> None:
        """Refuse, before anything is read or written, an episode `add_episode` could not take:
        a text episode with no LLM to extract it (`LLMRequiredError`; a queued one needs the
        LLM in the worker instead), or structured facts the ontology refuses (`InputError`)."""
        self.pipeline.check(episode, extract=extract, queued=queued)

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
            ep = (
                self._in_group(item)
                if isinstance(item, Episode)
                else episode_of({"group_id": self.group_id, **item}, where)
            )
            try:
                self.check_episode(ep, extract=extract, queued=not wait)
            except InputError as exc:
                raise type(exc)(f"{where}: {exc}") from None
            checked.append(ep)
        if not wait:
            return await self.pipeline.enqueue_many(
                checked, extract=extract, on_progress=on_progress
            )
        return await self.pipeline.add_many(
            checked, concurrency=concurrency, extract=extract, on_progress=on_progress
        )

    async def resolve_id(self, kind: IdKind, id: str, *, group_id: str | None = None) -> str:
        """The whole id of the episode or fact that `id` (a whole id, or a unique prefix of 6
        or more characters, as the tables show) names: see `kg.arguments.resolve_id`."""
        return await resolve_id(self.store, self._group(group_id), kind, id)

    async def rollback(
        self,
        episode_ids: str | list[str] | RollbackRequest,
        *,
        group_id: str | None = None,
        dry_run: bool | None = None,
        apply: bool | None = None,
    ) -> RollbackReport:
        """Plan undoing episodes (ids or unique prefixes of 6+ characters) and, with
        `dry_run=False`, carry it out atomically; see kg.rollback. By default only the plan
        (`dry_run=True`). `apply` is the deprecated opposite of `dry_run`. A
        `RollbackRequest` (instead of ids and `dry_run`) may name a source instead."""
        if isinstance(episode_ids, RollbackRequest):
            if dry_run is not None or apply is not None:
                raise TypeError("pass either a RollbackRequest or keyword fields, not both")
            return await self._rollback(episode_ids, self._group(group_id))
        ids = [episode_ids] if isinstance(episode_ids, str) else list(episode_ids)
        fields = {"episode_ids": ids, "dry_run": dry_run_of(dry_run, apply)}
        req = request_of(RollbackRequest, None, fields, "rollback")
        return await self._rollback(req, self._group(group_id))

    async def rollback_source(
        self,
        source_description: str | RollbackRequest,
        *,
        since: datetime | str | None = None,
        group_id: str | None = None,
        dry_run: bool | None = None,
        apply: bool | None = None,
    ) -> RollbackReport:
        """Undo every episode from one source (e.g. a web page), optionally since T: the
        ingested ones, and those still queued, leased or failed (cancelled). By default only
        the plan; `dry_run=False` carries it out."""
        if isinstance(source_description, RollbackRequest):
            return await self.rollback(
                source_description, group_id=group_id, dry_run=dry_run, apply=apply
            )
        fields = {
            "source_description": source_description,
            "since": since,
            "dry_run": dry_run_of(dry_run, apply),
        }
        req = request_of(RollbackRequest, None, fields, "rollback")
        return await self._rollback(req, self._group(group_id))

    async def _rollback(self, req: RollbackRequest, group_id: str) -> RollbackReport:
        """A rollback request carried out: its source's episodes, or its ids."""
        if req.source_description is None:
            ids = [await self.resolve_id("episode", i, group_id=group_id) for i in req.episode_ids]
            return await self._rollback_ids(ids, group_id, apply=not req.dry_run)
        found = await self.store.find_episodes(
            group_id, req.source_description, req.since, include_rolled_back=True
        )
        episodes = [e for e in found if e.status is EpisodeStatus.ingested or e.status in UNWRITTEN]
        if not episodes:
            return RollbackReport(group_id=group_id, episodes=[])
        return await self._rollback_ids([e.uuid for e in episodes], group_id, apply=not req.dry_run)

    async def _rollback_ids(self, ids: list[str], group_id: str, *, apply: bool) -> RollbackReport:
        async def attempt(base: GroupVersion) -> RollbackReport:
            plan, report = await plan_rollback(
                self.store, self.ontology, group_id, ids, self.clock.now()
            )
            if apply and not report.noop:
                plan.base = base
                # A rolled-back episode is never searched: its key needs no embedding.
                live = [k for k in plan.rekey if k.uuid not in plan.rolled_back]
                await self.pipeline.vectors.embed(group_id, plan.new_edges, keys=live)
                await self.store.rewrite(plan)
                report.applied = True
            return report

        async with self.pipeline.writer(group_id):
            report, _ = await retrying(self.store, self.clock, group_id, attempt)
            if report.applied:
                await self._refresh_communities(group_id, removed=report.episodes)
        return report

    async def replay(
        self,
        *,
        group_id: str | None = None,
        dry_run: bool | None = None,
        apply: bool | None = None,
    ) -> ReplayReport:
        """Rebuild the group from its episode log (e.g. after an ontology change) and compare;
        with `dry_run=False`, replace the live timelines with the rebuilt ones, atomically."""
        apply = not dry_run_of(dry_run, apply)
        group_id = self._group(group_id)

        async def attempt(base: GroupVersion) -> ReplayReport:
            plan, report = await plan_replay(self.store, self.ontology, group_id)
            if apply and not report.identical:
                plan.base = base
                await self.pipeline.vectors.embed(group_id, plan.new_edges)
                await self.store.rewrite(plan)
                report.applied = True
            return report

        async with self.pipeline.writer(group_id):
            report, _ = await retrying(self.store, self.clock, group_id, attempt)
            if report.applied:
                await self._refresh_communities(group_id)
        return report

    async def why(self, fact_id: str, *, group_id: str | None = None) -> Explanation:
        """Every version of a fact and the episodes that created, reinforced and closed it."""
        group_id = self._group(group_id)
        fact_id = await self.resolve_id("fact", fact_id, group_id=group_id)
        versions = await self.store.fact_versions(group_id, fact_id)
        if not versions:
            raise NotFoundError(f"no fact or fact version {fact_id!r} in group {group_id!r}")
        ids = {ep for v in versions for ep in v.edge.episodes}
        ids |= {v.edge.invalidated_by for v in versions if v.edge.invalidated_by}
        episodes = await self.store.episodes(group_id, sorted(ids))
        return Explanation(versions=versions, episodes=episodes)

    async def log(
        self,
        request: LogRequest | None = None,
        /,
        *,
        group_id: str | None = None,
        limit: int = 100,
        closures: bool = True,
    ) -> list[AuditEvent]:
        """Rollbacks, erasures and (derived from the versions themselves) closures, newest
        first. Pass a `LogRequest`, or its fields as keywords (not both)."""
        group_id = self._group(group_id)
        req = request_of(LogRequest, request, locals(), "log query")
        limit = req.limit
        events = await self.store.audit_log(group_id, limit)
        if req.closures:
            for f in await self.store.closures(group_id, limit):
                e = f.edge
                until = e.invalid_at.isoformat() if e.invalid_at else "?"
                events.append(
                    AuditEvent(
                        uuid=e.uuid,
                        group_id=group_id,
                        kind="closure",
                        created_at=e.created_at,
                        episodes=[e.invalidated_by or ""],
                        detail=f"{f.subject} {f.predicate} {f.object}: true until {until}"
                        + (f" ({e.invalidation_reason})" if e.invalidation_reason else ""),
                    )
                )
        return sorted(events, key=lambda ev: ev.created_at, reverse=True)[:limit]

    async def erase_entity(
        self,
        subject: str | EraseEntityRequest | None = None,
        *,
        group_id: str | None = None,
        dry_run: bool = False,
        keep_others: bool = False,
        name: str | None = None,
    ) -> ErasureReceipt:
        """Physically delete a subject: its episodes (queued ones too), facts, entity, and
        their traces on disk. Run again after a crash, it finishes what the crash interrupted.
        Pass an `EraseEntityRequest`, or its fields as keywords (not both).

        Args:
            dry_run: Erase nothing; the receipt says what would go, including the facts about
                other subjects that go with the subject's episodes (`other_facts_removed`).
            keep_others: Keep those facts, re-asserted from a redacted copy of each episode
                (the subject's name cut out; the copy's name says what it copies).
            name: The deprecated name of `subject`.
        """
        group_id = self._group(group_id)
        given = subject if isinstance(subject, EraseEntityRequest) else None
        fields: dict[str, Any] = {"dry_run": dry_run, "keep_others": keep_others, "name": name}
        if given is None:
            fields["subject"] = subject
        req = request_of(EraseEntityRequest, given, fields, "erasure")
        name, dry_run, keep_others = req.subject, req.dry_run, req.keep_others
        async with self.pipeline.writer(group_id):
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
                    embed=partial(self.pipeline.vectors.embed_rewrite, group_id),
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
            async with self.pipeline.writer(record.group_id):
                receipt = await finish_erasure(
                    self.store,
                    self.ontology,
                    record,
                    self.clock.now(),
                    embed=partial(self.pipeline.vectors.embed_rewrite, record.group_id),
                )
            log.warning(
                "finished an interrupted erasure in group %r; files compacted at %s",
                receipt.group_id,
                receipt.compacted_at,
            )
            receipts.append(receipt)
        return receipts

    async def erase_group(self, group_id: str | EraseGroupRequest) -> ErasureReceipt:
        """Physically delete a whole group, and compact the store's files. An
        `EraseGroupRequest` names it as `confirm`."""
        if isinstance(group_id, EraseGroupRequest):
            group_id = group_id.confirm
        group_id = self._group(group_id)
        async with self.pipeline.writer(group_id):
            self.pipeline.vectors.forget(group_id)  # its embedding model goes with it
            return await erase_group(self.store, group_id, self.clock.now())

    # -- graphiti-core graphs --------------------------------------------------------------

    async def adopt_graphiti(self, group_id: str | None = None) -> AdoptReport:
        """Give a group written by graphiti-core kg's keys, copy-on-close versions and
        replayable records (see kg.graphiti), then rebuild it by replay. Idempotent."""
        group_id = self._group(group_id)
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
                await self.pipeline.vectors.embed(group_id, plan.new_edges)
                await self.store.rewrite(plan)
            report.versions_created = replay.versions_created
            report.versions_deleted = replay.versions_deleted
            return report

        async with self.pipeline.writer(group_id):
            report, _ = await retrying(self.store, self.clock, group_id, attempt)
        return report

    # -- export and import ----------------------------------------------------------------

    def export_lines(
        self, group_id: str | None = None, *, embeddings: bool = True
    ) -> AsyncIterator[str]:
        """The group as JSON Lines (see kg.transfer): every version, uuid, time and vector."""
        group_id = self._group(group_id)
        return export_lines(self.store, group_id, embeddings=embeddings)

    async def import_lines(
        self, lines: Iterable[str], *, into: str | None = None, source: str = "<input>"
    ) -> TransferReport:
        """Load an export into a new group; a bad or truncated file leaves nothing behind."""
        async with self.pipeline.writer(into or "\0import"):
            return await import_lines(self.store, lines, into=into, source=source)

    # -- communities ----------------------------------------------------------------------

    async def build_communities(
        self, group_id: str | None = None, *, max_iterations: int = MAX_ITERATIONS
    ) -> CommunityReport:
        """Cluster the facts true now (label propagation) and summarise each community: with
        the LLM when kg has one (one call per changed community), else extractively.
        Unchanged clusters keep their summary, so a rebuild costs only what changed."""
        group_id = self._group(group_id)
        if not 1 <= max_iterations <= 1000:
            raise InputError(f"max_iterations must be in 1..1000, got {max_iterations}")
        async with self.pipeline.writer(group_id):
            return await self._build_communities(group_id, max_iterations=max_iterations)

    async def communities(self, group_id: str | None = None) -> list[Community]:
        group_id = self._group(group_id)
        return await self.store.communities(group_id)

    async def _build_communities(
        self, group_id: str, *, removed: Sequence[str] = (), max_iterations: int = MAX_ITERATIONS
    ) -> CommunityReport:
        return await rebuild_communities(
            self.store,
            self.clock,
            self.llm,
            self.pipeline.vectors,
            group_id,
            removed=removed,
            max_iterations=max_iterations,
        )

    async def _refresh_communities(self, group_id: str, removed: Sequence[str] = ()) -> None:
        """After a rollback, replay or erasure: rebuild if the group has communities."""
        if await self.store.communities(group_id):
            await self._build_communities(group_id, removed=list(removed))

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
        request: FactsRequest | None = None,
        /,
        *,
        group_id: str | None = None,
        subject: str | None = None,
        predicate: str | None = None,
        object: str | None = None,
        valid_at: datetime | str | None = None,
        known_at: datetime | str | None = None,
        include_contested: bool = False,
        limit: int = 1000,
    ) -> list[Fact]:
        """What was true at `valid_at` (default now), as kg knew it at `known_at` (default now).

        Pass a `FactsRequest`, or its fields as keywords (not both). Times are aware
        datetimes or strings: ISO-8601, "2021-01-01", "2021-03", "2021", or time words
        ("last year" is its first instant)."""
        group_id = self._group(group_id)
        req = request_of(FactsRequest, request, locals(), "facts query")
        now = self.clock.now()
        query = FactQuery(
            group_id=group_id,
            valid_at=req.valid_at or now,
            known_at=req.known_at or now,
            subject_key=None if req.subject is None else name_key(req.subject),
            predicate=self._predicate(req.predicate),
            object_key=None if req.object is None else name_key(req.object),
            include_contested=req.include_contested,
            limit=req.limit,
        )
        return await self.store.facts(query)

    async def history(
        self,
        request: HistoryRequest | None = None,
        /,
        *,
        group_id: str | None = None,
        subject: str | None = None,
        predicate: str | None = None,
        object: str | None = None,
        limit: int = 1000,
    ) -> list[Fact]:
        """Every version of the matching facts, retired ones included, with provenance. Pass
        a `HistoryRequest`, or its fields as keywords (not both)."""
        group_id = self._group(group_id)
        req = request_of(HistoryRequest, request, locals(), "history query")
        return await self.store.history(
            group_id,
            name_key(req.subject) if req.subject is not None else None,
            self._predicate(req.predicate),
            name_key(req.object) if req.object is not None else None,
            req.limit,
        )

    async def entities(
        self,
        request: EntitiesRequest | None = None,
        /,
        *,
        group_id: str | None = None,
        contains: str = "",
        limit: int = 100,
    ) -> list[EntitySummary]:
        """Entities whose normalised name contains `contains` (all for ''), the most-described
        subjects first: what a person picks a subject from. Pass an `EntitiesRequest`, or
        its fields as keywords (not both)."""
        group_id = self._group(group_id)
        req = request_of(EntitiesRequest, request, locals(), "entities query")
        key = name_key(req.contains) if req.contains else ""
        return await self.store.entities(group_id, key, req.limit)

    async def stats(self, group_id: str | None = None) -> StoreStats:
        group_id = self._group(group_id)
        return await self.store.stats(group_id, self.clock.now())

    async def quarantine(self, group_id: str | None = None) -> list[QuarantineEntry]:
        """What the instruction guard held back from untrusted channels, oldest first: facts
        that were never written and passages that `context()` withholds, each with its reason.
        Nothing here is a memory; re-send a fact through the user channel to keep it."""
        group_id = self._group(group_id)
        if group_id not in await self.store.groups():
            return []
        return [
            QuarantineEntry(
                episode_uuid=ep.uuid,
                created_at=ep.created_at,
                channel=ep.channel,
                source_description=ep.source_description,
                item=q,
            )
            for ep in await self.store.find_episodes(group_id, None, None)
            for q in ep.quarantined()
        ]

    async def review(
        self,
        request: ReviewRequest | None = None,
        /,
        *,
        group_id: str | None = None,
        limit: int = 200,
    ) -> list[ReviewItem]:
        """What kg holds back rather than believes, each with why: contested claims (a
        lower-trust channel contradicting a higher one) and quarantined items not yet
        decided, up to `limit` of each. A decision is a user-channel episode (see kg.review:
        `decision`), so it is provenance and rollback undoes it."""
        group_id = self._group(group_id)
        req = request_of(ReviewRequest, request, locals(), "review query")
        if group_id not in await self.store.groups():
            return []
        return await review_queue(self.store, group_id, req.limit)

    async def groups(self) -> list[str]:
        return await self.store.groups()

    # -- search ---------------------------------------------------------------------------

    async def search(
        self,
        query: str | SearchRequest,
        *,
        group_id: str | None = None,
        recipe: str | None = None,
        config: SearchConfig | None = None,
        limit: int | None = None,
        valid_at: datetime | str | None = None,
        known_at: datetime | str | None = None,
        include_closed: bool = False,
        include_contested: bool = False,
        center: str | None = None,
        seeds: list[str] | None = None,
        min_score: float | None = None,
        abstain_below: float | None = None,
        abstain_joint_below: float | None = None,
        asked_at: datetime | str | None = None,
        include_history: bool | None = None,
    ) -> SearchResults:
        """Hybrid search: BM25, cosine and BFS branches, fused (scores or RRF), then reranked.

        Pass a `SearchRequest`, or its fields as keywords (not both). Default view: facts
        true now and still believed. `valid_at` / `known_at` give any as-of view (a datetime, or
        a string: ISO-8601, "2021-01-01", "2021", "last year"); `include_closed` also returns
        closed facts, marked `closed` (`include_history` is its deprecated name). Pick a
        named `recipe` (see `retrieval.RECIPES`; the default is facts_hybrid, BM25 + cosine
        over facts, score-fused, or without an LLM facts_episodes_hybrid, which adds the
        episodes' text; facts_hybrid_bfs_rrf adds BFS) or pass a `config`. `center` and
        `seeds` are entity names (node distance, BFS). `abstain_below` leaves a scope empty
        when its best cosine similarity is below it (see `SearchConfig.abstain_below`);
        `abstain_joint_below` when no hit is found by both meaning and words
        (`SearchConfig.abstain_joint_below`).

        Time words in the query ("in 2022", "last March", "작년 3월") are read against
        `asked_at` (default: `valid_at`, else now) as a window: facts must be valid in it
        (closed ones included, marked), episodes in it rank higher; `results.time` says how
        they were read. Facts rank by their trust tier (an agent's inference below the user's
        word unless the user restated it) and by the ontology's recency decay, if declared.
        """
        group_id = self._group(group_id)
        if include_history is not None:
            deprecated("include_history", "include_closed")
            include_closed = include_history
        request = search_request(query, locals())
        if request.recipe is None and request.config is None and self.llm is None:
            # No LLM: text is stored unextracted, found only among the episodes.
            request = request.model_copy(update={"recipe": DEFAULT_RECIPE_WITHOUT_LLM})
        results = await self.searcher.search(group_id, request)
        self._observe(results)
        return results

    async def context(
        self,
        query: str | SearchRequest | ContextRequest,
        *,
        max_tokens: int = 1000,
        group_id: str | None = None,
        recipe: str | None = None,
        config: SearchConfig | None = None,
        limit: int | None = None,
        valid_at: datetime | str | None = None,
        known_at: datetime | str | None = None,
        include_closed: bool = False,
        include_contested: bool = False,
        center: str | None = None,
        seeds: list[str] | None = None,
        min_score: float | None = None,
        abstain_below: float | None = None,
        abstain_joint_below: float | None = None,
        asked_at: datetime | str | None = None,
        include_history: bool | None = None,
    ) -> str:
        """`search` with the same arguments, then the hits rendered as a quoted-data block for
        a prompt, within `max_tokens` (a hit that would overflow it is left out whole). Pass
        a `ContextRequest` (or a `SearchRequest` and `max_tokens`), or its fields as keywords."""
        if include_history is not None:
            deprecated("include_history", "include_closed")
            include_closed = include_history
        request = context_request(query, locals())
        results = await self.search(request, group_id=group_id)
        block = _render_context(results, max_tokens=request.max_tokens)
        group = results.group_id
        self._queries[group] = self._queries[group].merged(
            QueryMetrics(contexts=1, context_tokens=approx_tokens(block))
        )
        return block
