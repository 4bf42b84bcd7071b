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
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TypeVar

from kg.errors import WriteConflictError
from kg.schemas.plan import GroupVersion
from kg.schemas.store import PlanWriter
from kg.times import TransactionClock, utcnow

T = TypeVar("T")

ATTEMPTS = 20
FIRST_PAUSE = 0.005  # seconds; doubled after each conflict, the pause drawn uniformly below it
MAX_PAUSE = 0.5
LEASE_AFTER = 3  # conflicts after which a writer takes the group's lease (see `retrying`)
LEASE_SECONDS = 60
_LEASE = "lease "


def _lease(owner: str) -> str:
    until = (utcnow() + timedelta(seconds=LEASE_SECONDS)).isoformat()
    return f"{_LEASE}{owner} until {until}"


def _blocking(hold: str | None, mine: str | None) -> bool:
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
    holder: str | None = None,
) -> tuple[T, int]:
    """Run `attempt(base)` until its write lands at `base`: (its result, attempts used).

    `attempt` must do all of its reads after it is called and pass `base` to its write. A
    group held by a multi-step operation (an import, or another writer's lease) counts as a
    conflict, unless `holder` names that operation.

    Fairness: optimism alone lets quick writers overtake a slow one forever. So a writer
    overtaken LEASE_AFTER times takes the group's lease (a hold written at the version it
    just read, so it is itself fenced); others then wait, and its next attempt cannot be
    overtaken. The lease is released after that attempt, or lapses after LEASE_SECONDS if the
    writer dies; the version check, not the lease, is what keeps a stale write out.
    """
    lease: str | None = None
    last = WriteConflictError(f"group {group_id!r}: no attempt was made")
    try:
        for n in range(1, attempts + 1):
            base = await store.version(group_id)
            mine = lease if lease is not None and base.hold == lease else holder
            if _blocking(base.hold, mine):
                last = WriteConflictError(
                    f"group {group_id!r} is held by another operation ({base.hold}); if "
                    "none is running, it was interrupted: erase the group and run it again"
                )
            elif LEASE_AFTER < n < attempts and lease is None:
                try:
                    lease = _lease(uuid.uuid4().hex)
                    await store.set_hold(group_id, base, lease)
                    continue  # no pause: the next attempt is this writer's alone
                except WriteConflictError as exc:
                    lease, last = None, exc
            else:
                clock.advance_past(base.last_tx)
                try:
                    return await attempt(base), n
                except WriteConflictError as exc:
                    last = exc
            if n < attempts:
                await asyncio.sleep(random.uniform(0, min(MAX_PAUSE, FIRST_PAUSE * 2**n)))
    finally:
        if lease is not None:
            await _release(store, group_id, lease)
    raise WriteConflictError(
        f"gave up after {attempts} attempts to write group {group_id!r} while other writers "
        f"kept changing it; nothing was written by this call, so it can be retried. Last: {last}"
    )


async def _release(store: PlanWriter, group_id: str, lease: str) -> None:
    base = await store.version(group_id)
    if base.hold == lease:
        with contextlib.suppress(WriteConflictError):  # lapsed and taken over: not ours now
            await store.set_hold(group_id, base, None)
