"""Many writers, one server: a write is planned from reads, and lands only if nothing else
wrote the group since those reads began.

Every write plan is computed from what it reads (entities by name, the live versions on a
timeline, the episode log). Two processes writing one group would each plan from a state the
other is about to change: two current values of a single-valued fact, duplicate entities,
lost closures. So each attempt reads the group's version first, plans from reads made after
it, and writes with that version as the plan's `base`; the store checks it inside the atomic
write and refuses a stale one with nothing written (`WriteConflictError`). Then the attempt
runs again: re-read, re-plan, after a jittered pause that grows with each conflict, up to a
bounded number of attempts; a writer overtaken a few times takes a short lease on the group
so it cannot be starved (see `retrying`). Transaction times stay ordered across processes:
each attempt's clock is moved past the latest transaction time the group has stored.

See docs/design-decisions.md, "Many writers, one server".
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TypeVar

from kg.errors import WriteConflictError
from kg.schemas.plan import GroupVersion
from kg.schemas.store import PlanWriter
from kg.times import TransactionClock, utcnow

T = TypeVar("T")

ATTEMPTS = 10  # plans; a writer holds the lease from its fourth, so more are rare
FIRST_PAUSE = 0.005  # seconds; doubled after each conflict, the pause drawn uniformly below it
MAX_PAUSE = 0.5
LEASE_AFTER = 3  # conflicts after which a writer takes the group's lease (see `retrying`)
LEASE_SECONDS = 60
HOLD_WAIT_SECONDS = 120.0  # a lease lapses by then; an import may still be running
_LEASE = "lease "


def _lease(owner: str) -> str:
    until = (utcnow() + timedelta(seconds=LEASE_SECONDS)).isoformat()
    return f"{_LEASE}{owner} until {until}"


def blocking(hold: str | None, mine: str | None) -> bool:
    """Whether a hold keeps this writer out: another operation's, and not a lapsed lease
    (a lease outlives a writer that died holding it by at most LEASE_SECONDS)."""
    if hold is None or hold == mine:
        return False
    if hold.startswith(_LEASE):
        return datetime.fromisoformat(hold.rsplit(" until ", 1)[1]) > utcnow()
    return True


async def retrying(
    store: PlanWriter,
    clock: TransactionClock,
    group_id: str,
    attempt: Callable[[GroupVersion], Awaitable[T]],
    *,
    attempts: int = ATTEMPTS,
    known: GroupVersion | None = None,
) -> tuple[T, int]:
    """Run `attempt(base)` until its write lands at `base`: (its result, plans it took).

    `attempt` must do all of its reads after it is called and pass `base` to its write.

    `known`: a version this process saw current (the one its own last write made), planned
    at first without reading the version: the write's check is what makes that safe, as for
    any base. If another writer moved the group since, that plan is refused with nothing
    written and the attempt runs again at a version read as usual, with no pause; such a
    plan is not counted (it was no contest between writers), so one write saves a round trip
    when this process is the group's only writer, and costs a plan when it is not.

    Fairness: optimism alone lets quick writers overtake a slow one for ever. So a writer
    overtaken LEASE_AFTER times takes the group's lease (a hold written at the version it
    just read, so it is itself fenced); others then wait, and its next attempt cannot be
    overtaken. The lease is released after that attempt, or lapses after LEASE_SECONDS if the
    writer dies; the version check, not the lease, is what keeps a stale write out. Waiting
    for a held group (a lease, or an import) is bounded by HOLD_WAIT_SECONDS, not by
    `attempts`, which counts plans.
    """
    lease: str | None = None
    plans = waits = 0
    deadline = time.monotonic() + HOLD_WAIT_SECONDS
    try:
        while True:
            assumed, known = known, None
            base = assumed if assumed is not None else await store.version(group_id)
            if blocking(base.hold, lease):
                if assumed is not None:
                    continue  # read the hold as it stands now
                if time.monotonic() > deadline:
                    raise WriteConflictError(
                        f"group {group_id!r} stayed held by another operation ({base.hold}) "
                        f"for {HOLD_WAIT_SECONDS:.0f}s; nothing was written by this call. If "
                        "no import is running, one was interrupted: erase the group, import again"
                    )
                waits += 1
                await _pause(waits)
                continue
            if plans >= LEASE_AFTER and lease is None:
                lease = _lease(uuid.uuid4().hex)
                try:
                    await store.set_hold(group_id, base, lease)
                except WriteConflictError:
                    lease = None
                    await _pause(plans)
                continue  # with the lease, its version is the next attempt's base
            clock.advance_past(base.last_tx)
            plans += 1
            try:
                return await attempt(base), plans
            except WriteConflictError as exc:
                if assumed is not None:
                    plans -= 1
                    continue  # planned at a remembered version: read it, plan again
                if plans >= attempts:
                    raise WriteConflictError(
                        f"gave up after {attempts} plans for group {group_id!r}, each "
                        "overtaken by another writer; nothing was written by this call, so it "
                        f"can be retried. Last: {exc}"
                    ) from None
            await _pause(plans)
    finally:
        if lease is not None:
            await _release(store, group_id, lease)


async def _pause(n: int) -> None:
    """Full jitter: uniform below FIRST_PAUSE * 2**n, capped at MAX_PAUSE."""
    await asyncio.sleep(random.uniform(0, min(MAX_PAUSE, FIRST_PAUSE * 2**n)))


async def _release(store: PlanWriter, group_id: str, lease: str) -> None:
    base = await store.version(group_id)
    if base.hold == lease:
        with contextlib.suppress(WriteConflictError):  # lapsed and taken over: not ours now
            await store.set_hold(group_id, base, None)
