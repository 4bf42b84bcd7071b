"""Background ingestion: a worker that empties the queue kept in the graph store.

`add_episode(..., wait=False)` stores an episode as `queued` and returns; a `Worker` (the
`kg worker` command, or one embedded in a server as an asyncio task) claims queued episodes
and writes them. Per group:

- **One worker at a time.** A claim is refused while another worker holds a live lease in
  the group (kg.store.cypher.queue), so a group's episodes are written by one process, in
  order; many workers share many groups. A dead worker's leases lapse (`lease_seconds`) and
  the next worker takes its episodes over, the earliest first.
- **Extraction is pipelined.** The worker claims episodes in the group's order (reference
  time, then arrival) and starts their extraction calls, up to the LLM client's
  `max_concurrency` in flight, outside the group's writer lock. It claims more as extractions
  end, whatever the writes are doing, so the LLM is kept busy while earlier episodes are
  written. A finished extraction is kept on the episode (`staged`), so a worker taking it
  over does not ask the LLM again.
- **Resolution is asked ahead.** Once an episode is extracted, the resolution question it
  would ask against the graph as it stands is asked at once (kg.ingest.resolution.question);
  in its turn the reply is used only if the graph then asks the very same question, else the
  model is asked again, ahead of waiting extractions (the client serves resolution first).
- **Writes stay in order.** Vetting, resolution, planning and the atomic write run one
  episode at a time in the group's order, each against the graph as the previous write left
  it: the same graph a one-by-one ingest gives. The write completes the stored node and is
  guarded by the lease: a worker whose lease was taken over writes nothing.
- **Transient failures are retried** (endpoint down, store errors), with exponential backoff,
  up to `max_attempts` claims; a reply that stays invalid after its corrective retry fails
  the episode at once (a retry would ask the same model the same thing). A failed episode
  keeps its reasons and is counted; sending it again retries it. Nothing is dropped.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
import random
import uuid as uuidlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from kg.errors import InputError, KGError, LeaseLostError, LLMRequiredError, StoreUnavailableError
from kg.ingest.llm import LLMError, LLMOutputError, LLMUnavailableError
from kg.ingest.resolution import Answer, ask_ahead
from kg.pipeline import EpisodeResult, Pipeline
from kg.planners import Extracted
from kg.schemas.extraction import Extraction
from kg.schemas.graph import EpisodicNode

log = logging.getLogger("kg.queue")


class WorkerStats(BaseModel):
    """What a worker did since it started."""

    claimed: int = 0
    completed: int = 0
    retried: int = 0
    failed: int = 0
    lease_lost: int = 0
    released: int = 0  # handed back unfinished (the worker stopped, or had no LLM)
    llm_calls: int = 0


# Failures a retry would repeat: the model's reply stayed invalid after its corrective retry
# (same prompt, same model), the endpoint refused the request, or the episode does not plan.
# These fail the episode at once, recorded like a waiting add_episode's failure: sending it
# again retries it. The rest (endpoint down, store errors) are retried with backoff.
PERMANENT = frozenset({"llm_output", "llm_error", "invalid"})


def _next_idle(idle: float, poll_seconds: float) -> float:
    """The wait after another round that claimed nothing: doubled from 50 ms, capped."""
    return min(poll_seconds, max(0.05, 2 * idle))


def failure_reason(exc: BaseException) -> str:
    """A short, stable name for why an attempt failed (counted in the queue's metrics)."""
    if isinstance(exc, LLMOutputError):
        return "llm_output"
    if isinstance(exc, LLMUnavailableError):
        return "llm_unavailable"
    if isinstance(exc, LLMError):
        return "llm_error"
    if isinstance(exc, InputError):
        return "invalid"
    if isinstance(exc, KGError):
        return "store"
    return "error"


def stage_json(extracted: Extracted) -> str:
    extraction, calls = extracted
    return json.dumps(
        {
            "extraction": extraction.model_dump(mode="json"),
            "calls": [c.model_dump(mode="json") for c in calls],
        },
        ensure_ascii=False,
    )


def staged_extraction(node: EpisodicNode) -> Extracted | None:
    """The extraction an earlier worker kept on the episode. Its calls were paid for once
    already, so they are not counted again."""
    if not node.staged:
        return None
    try:
        data = json.loads(node.staged)
        return Extraction.model_validate(data["extraction"]), []
    except (ValueError, KeyError, ValidationError):
        return None


@dataclass
class _Item:
    node: EpisodicNode
    task: asyncio.Task[Extracted | None] | None = None
    answered: Answer | None = None  # its resolution question, asked once it was extracted
    called: bool = False  # its extraction call has returned
    lost: bool = False

    @property
    def order(self) -> tuple[datetime, datetime, str]:
        n = self.node
        return (n.valid_at, n.queued_at or n.created_at, n.uuid)


@dataclass
class _Group:
    window: list[_Item] = field(default_factory=list)  # claimed, unwritten, in order
    held: dict[str, _Item] = field(default_factory=dict)
    claiming: asyncio.Lock = field(default_factory=asyncio.Lock)
    feeder: asyncio.Task[None] | None = None  # a claim started as an extraction ended
    closed: bool = False  # handing back: claim nothing more


class Drives(Protocol):
    """What drives a pipeline, e.g. a `kg.KG`: a worker drives the same one."""

    @property
    def pipeline(self) -> Pipeline: ...


class Worker:
    """Claims queued episodes and writes them through the pipeline (`kg.pipeline`); see the
    module docstring.

    ```
    worker = Worker(kg)                 # kg opened with an LLM (text episodes), or its pipeline
    task = asyncio.create_task(worker.run())     # e.g. inside a server
    ...
    await worker.stop(); await task              # unfinished episodes are handed back
    ```
    `await worker.drain()` instead runs until the queue is empty and returns.
    """

    def __init__(
        self,
        source: Pipeline | Drives,
        *,
        groups: Sequence[str] | None = None,
        concurrency: int | None = None,
        group_concurrency: int = 4,
        lease_seconds: float = 60.0,
        poll_seconds: float = 1.0,
        max_attempts: int = 5,
        abandon_after: int = 10,
        backoff_seconds: float = 2.0,
        max_backoff_seconds: float = 300.0,
        session_timeout: float | None = None,
        owner: str | None = None,
        on_result: Callable[[EpisodeResult], None] | None = None,
    ) -> None:
        """
        Args:
            groups: The groups to work on (default: every group with queued episodes).
            concurrency: Extraction calls in flight (default: the LLM client's
                `max_concurrency`).
            group_concurrency: Groups drained at once.
            lease_seconds: How long a claim holds an episode without renewal; a dead
                worker's episodes are taken over this long after it died. Renewed every
                third of it while the worker lives.
            max_attempts: Claims before a failing episode is failed for good.
            abandon_after: Lapsed leases (dead workers) before an episode is failed as
                abandoned: it may be what kills them.
            backoff_seconds: First retry delay, doubled each attempt (jittered), capped at
                `max_backoff_seconds`.
            session_timeout: Hold an episode with a session id until its session has had
                no new message for this long (the session has ended).
            on_result: Called with each episode written (its summary: facts kept, dropped
                by rule, LLM calls and tokens), e.g. to publish it.
        """
        pipeline = source if isinstance(source, Pipeline) else source.pipeline
        if lease_seconds <= 0 or poll_seconds <= 0:
            raise InputError("lease_seconds and poll_seconds must be positive")
        if not 1 <= max_attempts <= 100 or abandon_after < 1:
            raise InputError("max_attempts must be in 1..100 and abandon_after at least 1")
        self.pipeline = pipeline
        self.store = pipeline.store
        self.groups = list(groups) if groups is not None else None
        llm = pipeline.llm
        limit = concurrency or (llm.max_concurrency if llm is not None else 4)
        if not 1 <= limit <= 256:
            raise InputError(f"concurrency must be in 1..256, got {limit}")
        self.concurrency = limit
        self.window = 2 * limit  # extractions waiting or in flight, topped up as they end
        self.group_slots = asyncio.Semaphore(group_concurrency)
        self.lease = timedelta(seconds=lease_seconds)
        self.poll_seconds = poll_seconds
        self.max_attempts = max_attempts
        self.abandon_after = abandon_after
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.session_timeout = (
            timedelta(seconds=session_timeout) if session_timeout is not None else None
        )
        self.owner = owner or f"worker-{uuidlib.uuid4().hex[:12]}"
        self.stats = WorkerStats()
        self.on_result = on_result
        self._llm_slots = asyncio.Semaphore(limit)
        self._wake = asyncio.Event()
        self._stopping = False
        self._draining: dict[str, asyncio.Task[None]] = {}
        self._active: dict[str, _Group] = {}

    # -- control --------------------------------------------------------------------------

    def wake(self, group_id: str | None = None) -> None:
        """Something was enqueued: look now instead of at the next poll."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop claiming; the episode being written is finished, the rest handed back
        (queued again, the claim not counted) and `run` returns."""
        self._stopping = True
        self._wake.set()

    async def stop_within(self, running: asyncio.Task[WorkerStats], seconds: float) -> WorkerStats:
        """Stop, and give `running` (the task of `run`) `seconds` to finish the episode being
        extracted and written; past that, give up the extractions still in flight (their
        episodes are handed back, queued again with the claim not counted). A store write
        already under way still finishes: it is never cut in half."""
        await self.stop()
        done, _ = await asyncio.wait({running}, timeout=max(seconds, 0.0))
        if not done:
            log.warning(
                "worker %s: extraction outlasted the graceful timeout (%g s); "
                "handing its episodes back",
                self.owner,
                seconds,
            )
            for state in list(self._active.values()):
                for item in list(state.held.values()):
                    if item.task is not None:
                        item.task.cancel()
        return await running

    async def run(self) -> WorkerStats:
        """Work until `stop()`: poll for groups with queued episodes, drain them."""
        self.pipeline.enqueue_listeners.append(self.wake)
        try:
            while not self._stopping:
                await self._start_drains()
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.poll_seconds):
                        await self._wake.wait()
        finally:
            self.pipeline.enqueue_listeners.remove(self.wake)
            await self._join_drains()
        return self.stats

    async def drain(self) -> WorkerStats:
        """Work until no episode of the groups is queued or processing (waiting out other
        workers' lapsed leases and retry backoffs), then return."""
        idle = 0.0
        try:
            while not self._stopping:
                pending = await self._queued_groups()
                if not pending and not self._draining:
                    break
                # After a round that claimed nothing (every queued group leased by another
                # worker, or waiting out a backoff), wait longer each time, up to
                # `poll_seconds`: asking again at once spun a query per round trip.
                await asyncio.sleep(idle)
                claimed = self.stats.claimed
                await self._start_drains(pending)
                if self._draining:
                    await asyncio.wait(list(self._draining.values()), timeout=self.poll_seconds)
                idle = 0.0 if self.stats.claimed > claimed else _next_idle(idle, self.poll_seconds)
        finally:
            await self._join_drains()
        return self.stats

    async def _queued_groups(self) -> list[str]:
        groups = self.groups if self.groups is not None else await self.store.groups()
        return await self.store.queued_groups(groups)

    async def _start_drains(self, pending: list[str] | None = None) -> None:
        try:
            if pending is None:
                pending = await self._queued_groups()
        except StoreUnavailableError as exc:
            log.warning("worker %s: store unavailable, retrying: %s", self.owner, exc)
            return
        for g in pending:
            if g not in self._draining:
                task = asyncio.create_task(self._drain_group(g))
                self._draining[g] = task
                task.add_done_callback(partial(self._drained, g))

    def _drained(self, group_id: str, _: asyncio.Task[None]) -> None:
        self._draining.pop(group_id, None)

    async def _join_drains(self) -> None:
        self._stopping = True
        if self._draining:
            await asyncio.gather(*self._draining.values(), return_exceptions=True)

    # -- one group ------------------------------------------------------------------------

    async def _drain_group(self, group_id: str) -> None:
        async with self.group_slots:
            state = _Group()
            self._active[group_id] = state
            renewer = asyncio.create_task(self._renew(group_id, state))
            try:
                await self._pipeline(group_id, state)
            except StoreUnavailableError as exc:
                log.warning("worker %s: store unavailable in %r: %s", self.owner, group_id, exc)
            except Exception:
                log.exception(
                    "worker %s: group %r stopped on an unexpected error", self.owner, group_id
                )
            finally:
                renewer.cancel()
                await self._hand_back(group_id, state)
                self._active.pop(group_id, None)

    async def _pipeline(self, group_id: str, state: _Group) -> None:
        while not self._stopping:
            await self._top_up(group_id, state)
            if not state.window:
                return
            item = state.window.pop(0)
            try:
                await self._finish(group_id, item)
            finally:
                state.held.pop(item.node.uuid, None)

    async def _top_up(self, group_id: str, state: _Group) -> None:
        """Claim more when fewer than `window` extraction calls are waiting or in flight, so
        the LLM is kept busy whatever the writes are doing (called by the writing loop and as
        each extraction call returns); at most `4 * window` episodes are held unwritten."""
        async with state.claiming:
            if self._stopping or state.closed:
                return
            pending = sum(
                1 for i in state.window if i.task is not None and not (i.called or i.task.done())
            )
            room = min(self.window - pending, 4 * self.window - len(state.window))
            # Claims come in runs (a claim is two round trips), except to fill an empty window.
            if room <= 0 or (state.window and room < self.window // 4):
                return
            await self._claim(group_id, state, room)

    def _extracted(self, group_id: str, state: _Group) -> None:
        if not (self._stopping or state.closed) and (state.feeder is None or state.feeder.done()):
            state.feeder = asyncio.create_task(self._feed(group_id, state))

    def _task_ended(self, group_id: str, state: _Group, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or task.exception() is not None:  # the call failed: claim on
            self._extracted(group_id, state)

    async def _feed(self, group_id: str, state: _Group) -> None:
        try:
            await self._top_up(group_id, state)
        except KGError as exc:  # the writing loop claims again (and meets the error itself)
            log.warning("worker %s: claim in %r failed: %s", self.owner, group_id, exc)

    async def _claim(self, group_id: str, state: _Group, want: int) -> None:
        now = self.pipeline.clock.now()
        ready, busy = await self.store.ready(group_id, self.owner, now, want + len(state.held))
        if busy:
            return
        ready = [n for n in ready if n.uuid not in state.held]
        if self.pipeline.llm is None:  # text episodes wait for a worker that has an LLM
            ready = [n for n in ready if not self.pipeline.extracts(n)]
        ready = await self._abandon_dead(group_id, ready, now)
        if self.session_timeout is not None:
            ready = await self._ended_sessions(group_id, ready, now)
        claimed = await self.store.claim(
            group_id, self.owner, [n.uuid for n in ready[:want]], now, now + self.lease
        )
        self.stats.claimed += len(claimed)
        for node in claimed:
            item = _Item(node)
            if self.pipeline.extracts(node) and staged_extraction(node) is None:
                item.task = asyncio.create_task(self._extract(group_id, state, item))
                item.task.add_done_callback(partial(self._task_ended, group_id, state))
            state.held[node.uuid] = item
            keys = [i.order for i in state.window]
            state.window.insert(bisect.bisect(keys, item.order), item)

    async def _abandon_dead(
        self, group_id: str, ready: list[EpisodicNode], now: datetime
    ) -> list[EpisodicNode]:
        keep = []
        for n in ready:
            if n.status == "processing" and n.attempts >= self.abandon_after:
                error = f"abandoned: {n.attempts} workers died holding it"
                if await self.store.abandon(group_id, n.uuid, now, self.abandon_after, error):
                    self.stats.failed += 1
                continue
            keep.append(n)
        return keep

    async def _ended_sessions(
        self, group_id: str, ready: list[EpisodicNode], now: datetime
    ) -> list[EpisodicNode]:
        assert self.session_timeout is not None
        sessions = [n.session_id for n in ready if n.session_id is not None]
        last = await self.store.session_activity(group_id, sessions)
        return [
            n
            for n in ready
            if n.session_id is None or last.get(n.session_id, now) + self.session_timeout <= now
        ]

    async def _extract(self, group_id: str, state: _Group, item: _Item) -> Extracted | None:
        """The episode's extraction call, then its resolution question asked ahead of its
        turn; only the calls take one of the worker's `concurrency` slots."""
        if item.lost or self._stopping:
            return None
        context = await self.pipeline.extraction_context(item.node)
        async with self._llm_slots:
            if item.lost or self._stopping:
                return None
            try:
                extracted = await self.pipeline.extract(item.node, context)
            except Exception as exc:  # an invalid reply and its retry were spent all the same
                self.stats.llm_calls += len(getattr(exc, "calls", []))
                raise
        self.stats.llm_calls += len(extracted[1])
        item.called = True
        self._extracted(group_id, state)  # claim the next while this one is staged
        with contextlib.suppress(KGError):  # kept for a takeover; the write does not need it
            await self.store.stage(group_id, item.node.uuid, self.owner, stage_json(extracted))
        try:
            q = await self.pipeline.resolution_question(item.node, extracted)
        except KGError as exc:  # only a head start: the write asks in turn
            log.info("worker %s: no resolution ahead for %s: %s", self.owner, item.node.uuid, exc)
            q = None
        if q is not None and self.pipeline.llm is not None:
            async with self._llm_slots:
                if not (item.lost or self._stopping):
                    item.answered = await ask_ahead(self.pipeline.llm, q)
                    self.stats.llm_calls += len(item.answered.calls)
        return extracted

    async def _finish(self, group_id: str, item: _Item) -> None:
        node = item.node
        try:
            extracted = staged_extraction(node)
            if item.task is not None:
                await asyncio.wait({item.task})  # a given-up extraction is cancelled: none
                extracted = None if item.task.cancelled() else item.task.result()
            if item.lost:
                raise LeaseLostError(f"episode {node.uuid}: lease lost")
            if extracted is None and self.pipeline.extracts(node):
                raise LLMRequiredError("no extraction (the worker is stopping)")
            result = await self.pipeline.complete(node, self.owner, extracted, item.answered)
            self.stats.completed += 1
            if extracted is not None:  # the calls resolution made in turn, counted once
                ahead = len(item.answered.calls) if item.answered is not None else 0
                in_turn = result.summary.llm_calls - len(extracted[1]) - ahead
                self.stats.llm_calls += max(0, in_turn)
            if self.on_result is not None:
                self.on_result(result)
        except LeaseLostError:
            self.stats.lease_lost += 1
        except StoreUnavailableError:
            raise  # the drain stops; the lease lapses and the episode is taken over
        except LLMRequiredError as exc:  # no LLM here, or stopping: not the episode's fault
            await self._give_back(group_id, node, str(exc))
        except Exception as exc:  # the episode failed this attempt: retry or fail it
            await self._failed(group_id, node, exc)

    async def _failed(self, group_id: str, node: EpisodicNode, exc: BaseException) -> None:
        calls: list[Any] = list(getattr(exc, "calls", []))
        reason = failure_reason(exc)
        final = node.attempts >= self.max_attempts or reason in PERMANENT
        delay = min(self.max_backoff_seconds, self.backoff_seconds * 2 ** (node.attempts - 1))
        later = self.pipeline.clock.now() + timedelta(seconds=random.uniform(delay / 2, delay))
        if not isinstance(exc, LLMError | KGError):
            log.exception("worker %s: episode %s failed", self.owner, node.uuid, exc_info=exc)
        try:
            await self.store.release(
                group_id,
                node.uuid,
                self.owner,
                failed=final,
                next_attempt_at=None if final else later,
                error=f"{type(exc).__name__}: {exc}"[:2000],
                reason=reason,
                llm_calls=len(calls),
                llm_tokens=sum(c.prompt_tokens + c.completion_tokens for c in calls),
            )
        except LeaseLostError:
            self.stats.lease_lost += 1
            return
        if final:
            self.stats.failed += 1
        else:
            self.stats.retried += 1

    async def _give_back(self, group_id: str, node: EpisodicNode, why: str) -> None:
        with contextlib.suppress(KGError):
            if await self.store.release(
                group_id, node.uuid, self.owner, failed=False, error=why, undo_attempt=True
            ):
                self.stats.released += 1

    async def _hand_back(self, group_id: str, state: _Group) -> None:
        """A stopping (or failing) drain returns what it claimed and has not written."""
        state.closed = True
        if state.feeder is not None:  # a claim under way finishes, and is handed back too
            with contextlib.suppress(BaseException):
                await state.feeder
        for item in list(state.window):
            if item.task is not None:
                item.task.cancel()
                with contextlib.suppress(BaseException):
                    await item.task
            await self._give_back(group_id, item.node, "handed back by a stopping worker")
        state.window.clear()
        state.held.clear()

    async def _renew(self, group_id: str, state: _Group) -> None:
        """Keep the leases alive while the worker lives; a lease found taken over marks its
        episode lost (its write would be refused anyway)."""
        every = self.lease.total_seconds() / 3
        while True:
            await asyncio.sleep(every)
            uuids = list(state.held)
            if not uuids:
                continue
            try:
                kept = await self.store.renew(
                    group_id, self.owner, uuids, self.pipeline.clock.now() + self.lease
                )
            except KGError as exc:
                log.warning("worker %s: lease renewal failed: %s", self.owner, exc)
                continue
            for u in uuids:
                if u not in kept and u in state.held:
                    state.held[u].lost = True
