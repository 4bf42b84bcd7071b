"""`kg placement move`: a group moved from one store server of a deployment to another
(kg.store.placed), with no fact lost or doubled and its history whole.

The move holds the group on its source (`set_hold`: the fence every versioned write checks
inside its own transaction, so a write either commits before the hold and is exported, or is
refused after it and retried), exports it, imports it into the target as a new group (staged,
published in one step), checks that the target holds exactly the records the source held
(every fact version, with both time axes), switches the group's row, and drops the source
copy. A writer whose process still places the group on the source meets the hold or the
missing group there, reads the row again and writes to the target. See
docs/design-decisions.md, "Groups placed on several store servers".
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from typing import IO

from pydantic import BaseModel

from kg.errors import InputError, WriteConflictError
from kg.schemas.store import Placement
from kg.store.placed import Backend, PlacedStore
from kg.times import utcnow
from kg.transfer import export_lines, import_lines
from kg.versioned import blocking

_HOLD = "move to "
HOLD_WAIT_SECONDS = 60.0  # another operation's hold (an import, a writer's lease) ends by then


class MoveReport(BaseModel):
    group_id: str
    source: str
    target: str
    counts: dict[str, int]


async def check_move(
    placed: PlacedStore, group_id: str, to: str, *, restart: bool = False
) -> tuple[str, Placement | None]:
    """The group's store and row, or a one-line error for a move that cannot start; nothing
    is changed by asking."""
    if to not in placed.stores:
        raise InputError(f"no store {to!r}; the stores are: {', '.join(placed.stores)}")
    row = await placed.directory.placement(group_id)
    source = row.store if row is not None else placed.default
    if not await placed.stores[source].has_group(group_id):
        raise InputError(f"no group {group_id!r} on its store {source!r}")
    if source == to:
        raise InputError(f"group {group_id!r} is on store {to!r} already")
    if row is not None and row.moving:
        if restart:
            return source, row  # the rest is checked once the interrupted move is undone
        raise InputError(
            f"group {group_id!r} is being moved already; if that move was interrupted (its "
            "process is gone), run this move again with --restart"
        )
    queue = await placed.stores[source].queue_metrics(group_id, utcnow())
    if queue.queued or queue.processing:
        raise InputError(
            f"group {group_id!r} has {queue.queued + queue.processing} episodes in the "
            "background queue; move it once `kg worker` has done them"
        )
    if await placed.stores[to].has_group(group_id):
        raise InputError(f"store {to!r} holds a group {group_id!r} already; erase it there first")
    return source, row


async def move_group(
    placed: PlacedStore, group_id: str, to: str, *, restart: bool = False
) -> MoveReport:
    """Move the group to store `to` (see the module docstring); on a failure before the
    switch, the source is released and the target copy dropped: nothing has moved.
    `restart`: first undo a move of the group that was interrupted (its process is gone:
    a move still running would be broken)."""
    name, row = await check_move(placed, group_id, to, restart=restart)
    if restart and row is not None and row.moving:
        held = (await placed.stores[name].version(group_id)).hold or ""
        if held.startswith(_HOLD):
            await _undo(placed, group_id, name, held.removeprefix(_HOLD).split()[0], held)
        else:
            await placed.directory.set_placement(Placement(group_id=group_id, store=name))
        name, row = await check_move(placed, group_id, to)
    source, target = placed.stores[name], placed.stores[to]
    await placed.directory.set_placement(Placement(group_id=group_id, store=name, moving=True))
    hold = f"{_HOLD}{to} (kg placement move)"
    try:
        await _hold(source, group_id, hold)
        with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
            source_digest = await _spool(export_lines(source, group_id), spool)
            spool.seek(0)
            report = await import_lines(target, _lines(spool), into=group_id, source=name)
        target_digest = await _spool(export_lines(target, group_id), None)
        if target_digest != source_digest:
            raise InputError(
                f"group {group_id!r}: the copy on {to!r} differs from the source; nothing was moved"
            )
        await placed.directory.set_placement(Placement(group_id=group_id, store=to))
    except BaseException:
        await _undo(placed, group_id, name, to, hold)
        raise
    placed.forget(group_id)
    await source.drop_group(group_id)
    return MoveReport(group_id=group_id, source=name, target=to, counts=report.counts)


async def _hold(store: Backend, group_id: str, hold: str) -> None:
    """Set the move's hold at the group's version, waiting out another operation's."""
    deadline = time.monotonic() + HOLD_WAIT_SECONDS
    while True:
        base = await store.version(group_id)
        if not blocking(base.hold, None):  # none, or a writer's lapsed lease
            with contextlib.suppress(WriteConflictError):  # a write landed first: again
                await store.set_hold(group_id, base, hold)
                return
        elif time.monotonic() > deadline:
            raise InputError(f"group {group_id!r} stayed held ({base.hold}); nothing was moved")
        await asyncio.sleep(0.05)


async def _spool(lines: AsyncIterator[str], into: IO[str] | None) -> str:
    """A digest of an export's records (not its header, which names the time and the
    backend), each line written to `into` if given."""
    digest = hashlib.sha256()
    async for line in lines:
        if into is not None:
            into.write(line + "\n")
        if json.loads(line).get("record") != "header":
            digest.update(line.encode())
    return digest.hexdigest()


def _lines(spool: IO[str]) -> Iterator[str]:
    for line in spool:
        yield line.rstrip("\n")


async def _undo(placed: PlacedStore, group_id: str, name: str, to: str, hold: str) -> None:
    """Back to where the move started: the target copy dropped, the source released."""
    with contextlib.suppress(Exception):
        row = await placed.directory.placement(group_id)
        if row is not None and row.store == to:  # switched: the move is done but for the drop
            return
        if to in placed.stores:
            await placed.stores[to].drop_group(group_id)
        await placed.directory.set_placement(Placement(group_id=group_id, store=name))
        base = await placed.stores[name].version(group_id)
        if base.hold == hold:
            await placed.stores[name].set_hold(group_id, base, None)


class PlacementRow(BaseModel):
    """A group as `kg placement show` lists it: where it is, and whether that is its row's
    word (`placed`) or the default store's (a group written before placement was set up)."""

    group_id: str
    store: str
    moving: bool = False
    placed: bool = True


async def placement_rows(placed: PlacedStore) -> list[PlacementRow]:
    """Every group of the deployment: the table's rows, then the groups a store holds
    without one (routed to the default store)."""
    rows = {p.group_id: PlacementRow(**p.model_dump()) for p in await placed.directory.placements()}
    for name, store in placed.stores.items():
        for group in await store.groups():
            if group not in rows:
                rows[group] = PlacementRow(group_id=group, store=name, placed=False)
    return sorted(rows.values(), key=lambda r: r.group_id)
