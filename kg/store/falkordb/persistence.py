"""Keeping the embedded store's files cheap to reopen: when and how the AOF is folded.

The AOF is an RDB base plus a log of the commands sent since (redis 7+ multi-part AOF).
Loading the base costs what the data costs; replaying the log runs every write again. So kg
folds the log into a new base (BGREWRITEAOF) when it would take longer to replay than the
base takes to load, on a clean close and after a start that had to replay it, and redis does
the same on its own as the log grows (`auto-aof-rewrite-percentage`, see embedded.py).

One more reason to fold: a unique constraint. FalkorDB logs GRAPH.CONSTRAINT CREATE when it
is sent and again when it comes into force, and a replayed one comes into force again, so
every start that replays one appends another (and logs a CRITICAL line for each copy that
fails). A log holding one is folded whatever its size, once the constraints are in force, so
that the copy they append lands before the rewrite and is folded with the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from redis.exceptions import ResponseError

from kg.errors import StoreError

log = logging.getLogger("kg")

# Fold when the log is at least FOLD_MIN_BYTES and 1/FOLD_DIVISOR of the base: a byte of log
# replays about a hundred times slower than a byte of base loads (benchmarks/reopen.py), so
# such a log would take longer to replay than the base takes to load.
FOLD_MIN_BYTES = 256 * 1024
FOLD_DIVISOR = 64
BUSY = ("aof_rewrite_in_progress", "aof_rewrite_scheduled", "rdb_bgsave_in_progress")
_CHUNK = 1 << 20


def aof_files(data_dir: Path) -> tuple[list[Path], list[Path]]:
    """The live AOF parts, from the manifest: (base files, incremental logs). INFO's sizes
    will not do: after a rewrite it counts the writes made while it ran as part of the base,
    though they are in the new log and a start replays them."""
    folder = data_dir / "appendonlydir"
    bases: list[Path] = []
    logs: list[Path] = []
    for manifest in folder.glob("*.manifest"):
        try:
            lines = manifest.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            meta = dict(zip(fields[::2], fields[1::2], strict=False))
            if "file" in meta and meta.get("type") == "b":
                bases.append(folder / meta["file"])
            elif "file" in meta and meta.get("type") == "i":  # not "h": history, being removed
                logs.append(folder / meta["file"])
    return bases, logs


def _size(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except OSError:
            continue
    return total


def log_is_long(data_dir: Path) -> bool:
    bases, logs = aof_files(data_dir)
    return _size(logs) >= max(FOLD_MIN_BYTES, _size(bases) // FOLD_DIVISOR)


def log_has_constraints(data_dir: Path) -> bool:
    """Whether the command log (the AOF's incremental files) holds a GRAPH.CONSTRAINT."""
    needle = b"graph.constraint"
    for path in aof_files(data_dir)[1]:
        try:
            with path.open("rb") as f:
                tail = b""
                while chunk := f.read(_CHUNK):
                    if needle in (tail + chunk).lower():
                        return True
                    tail = chunk[-len(needle) :]
        except OSError:
            continue
    return False


# A constraint's statuses while it is built: FalkorDB 4.16 reports UNDER CONSTRUCTION (older
# releases PENDING); only OPERATIONAL and FAILED are settled.
SETTLED = ("OPERATIONAL", "FAILED")


async def constraints_in_force(db: Any) -> None:
    """Wait until no graph has a constraint still being built (a replayed one is rebuilt
    after loading; it logs its second copy when it comes into force, so a fold before then
    leaves that copy in the new log, replayed as an error at the next start)."""
    while True:
        pending = False
        for graph in await db.list_graphs():
            try:
                result = await db.select_graph(graph).ro_query(
                    "CALL db.constraints() YIELD status RETURN status"
                )
            except ResponseError:
                continue
            pending |= any(row[0] not in SETTLED for row in result.result_set)
        if not pending:
            return
        await asyncio.sleep(0.05)


async def idle(conn: Any) -> dict[str, Any]:
    """INFO persistence once no rewrite or save is running (sizes settle after one)."""
    while True:
        info: dict[str, Any] = await conn.info("persistence")
        if not any(info.get(k) for k in BUSY):
            return info
        await asyncio.sleep(0.05)


# What redis answers a rewrite or save asked for while another child process runs.
_REFUSED_WHILE_BUSY = ("in progress", "already", "child process is active")


async def rewrite(conn: Any) -> None:
    """Start a rewrite of our own (one already running may have started before a deletion,
    so it would not do) and wait for it. A rewrite takes what the data takes, so there is no
    deadline: it fails only when the server says it failed."""
    info = await conn.info("persistence")
    aof = bool(info.get("aof_enabled"))
    command = "BGREWRITEAOF" if aof else "BGSAVE"
    done = "aof_rewrites" if aof else "rdb_saves"
    failed = "aof_rewrites_consecutive_failures"
    done_before, failed_before = info.get(done, 0), info.get(failed, 0)
    started = logged = time.monotonic()
    while True:
        try:
            await conn.execute_command(command)
            break
        except ResponseError as exc:  # another rewrite or save is running
            if not any(b in str(exc) for b in _REFUSED_WHILE_BUSY):
                raise StoreError(f"FalkorDB refused {command}: {exc}") from exc
        await asyncio.sleep(0.05)
    while True:
        info = await conn.info("persistence")
        if aof and info.get(failed, 0) > failed_before:
            raise StoreError("FalkorDB's AOF rewrite failed; see redis.log")
        if not any(info.get(k) for k in BUSY) and info.get(done, 0) > done_before:
            break
        if time.monotonic() - logged >= 10:
            log.info("compacting the store's files: %.0f s so far", time.monotonic() - started)
            logged = time.monotonic()
        await asyncio.sleep(0.05)
    if aof and info.get("aof_last_bgrewrite_status", "ok") != "ok":
        raise StoreError("FalkorDB's AOF rewrite failed; see redis.log")


async def fold(db: Any, data_dir: Path, *, wait: bool) -> bool:
    """Fold the command log into a new base if it is long or holds a constraint; with
    `wait`, until done (and again if a constraint's second copy still landed after it).
    Returns whether a fold was started."""
    conn = db.connection
    info = await idle(conn) if wait else await conn.info("persistence")
    if not info.get("aof_enabled"):
        return False
    if not (log_is_long(data_dir) or log_has_constraints(data_dir)):
        return False
    if not wait:
        if not any(info.get(k) for k in BUSY):
            await constraints_in_force(db)
            with contextlib.suppress(ResponseError):  # one started meanwhile will do
                await conn.execute_command("BGREWRITEAOF")
        return True
    for _ in range(3):
        await constraints_in_force(db)
        await rewrite(conn)
        if not log_has_constraints(data_dir):
            break
    return True
