"""The embedded store keeps its data across restarts, a killed server and a killed kg process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kg import KG, DataDirLockedError, StoreUnavailableError
from kg.store.falkordb import FalkorDBStore
from kg.store.falkordb.embedded import Durability, EmbeddedServer, pid_alive
from tests.conftest import add, fact, objects, t
from tests.disk import written_to_file

# The embedded server's own life: its files, restarts, kills, lock and stale servers. On Neo4j
# the server is the operator's (a write plan is one transaction; recovery is Neo4j's own).
pytestmark = pytest.mark.falkordb_only("the embedded server's lifecycle, files and lock")


def _server_pid(kg: KG) -> int:
    assert isinstance(kg.store, FalkorDBStore) and kg.store.server is not None
    pid = kg.store.server.pid
    assert pid is not None
    return pid


def _wait_dead(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


async def test_data_survives_a_clean_restart(home: Path) -> None:
    async with await KG.open(home=home) as kg:
        await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
        await add(kg, t(2023), ("Alice", "LIVES_IN", "Busan"))
    async with await KG.open(home=home) as kg:
        assert objects(await kg.facts(subject="Alice")) == ["Busan"]
        assert objects(await kg.facts(subject="Alice", valid_at=t(2021))) == ["Seoul"]
        # Idempotency survives too: the hash index came back with the data.
        again = await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
        assert again.status == "duplicate"


async def _aof_buffer(kg: KG) -> int:
    assert isinstance(kg.store, FalkorDBStore)
    return int((await kg.store.client.connection.info("persistence"))["aof_buffer_length"])


@pytest.mark.parametrize("durability", ["everysec", "always"])
async def test_data_survives_a_killed_server(home: Path, durability: Durability) -> None:
    """The contract per setting (README, docs/design-decisions.md): under `always` an
    acknowledged write is in the file before the reply, so the server may be killed at once;
    under the default everysec, redis may hold acknowledged writes in memory for up to 2 s
    while an fsync runs, and what survives a killed server is what reached the file."""
    kg = await KG.open(home=home, durability=durability)
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    await add(kg, t(2023), ("Alice", "LIVES_IN", "Busan"))
    if durability == "always":
        assert await _aof_buffer(kg) == 0  # written (and fsynced) before the reply
    else:
        await written_to_file(kg.store)  # the window everysec leaves, waited out
    pid = _server_pid(kg)
    os.kill(pid, signal.SIGKILL)
    assert _wait_dead(pid)
    with pytest.raises(StoreUnavailableError):
        await kg.facts(subject="Alice")
    await kg.close()  # must cope with the dead server

    async with await KG.open(home=home) as kg2:
        assert objects(await kg2.facts(subject="Alice")) == ["Busan"]
        assert len(await kg2.history(subject="Alice")) == 3


async def test_data_survives_a_killed_kg_process(home: Path) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, os, signal, sys
        from datetime import datetime, UTC
        from kg import KG

        async def main():
            kg = await KG.open(home={str(home)!r})
            await kg.add_episode(source="facts", reference_time=datetime(2020, 1, 1, tzinfo=UTC),
                facts=[{{"subject": "Alice", "predicate": "LIVES_IN", "object": "Seoul"}}])
            print(kg.store.server.pid, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # no close(), no atexit

        asyncio.run(main())
        """
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=subprocess.PIPE, cwd=Path(__file__).parents[1]
    )
    out, _ = await proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    server_pid = int(out.decode().strip())
    # The orphaned server follows its owner down instead of holding the directory.
    assert _wait_dead(server_pid)

    async with await KG.open(home=home) as kg:
        assert objects(await kg.facts(subject="Alice")) == ["Seoul"]


async def test_a_second_opener_of_the_same_directory_is_refused(home: Path) -> None:
    async with await KG.open(home=home) as kg:
        await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
        with pytest.raises(DataDirLockedError, match=str(os.getpid())):
            await KG.open(home=home)
        # The refused opener must not have disturbed the owner.
        assert objects(await kg.facts(subject="Alice")) == ["Seoul"]
    async with await KG.open(home=home) as kg:  # released on close
        assert objects(await kg.facts(subject="Alice")) == ["Seoul"]


async def test_stale_server_from_a_dead_owner_is_reaped(home: Path) -> None:
    kg = await KG.open(home=home)
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    assert isinstance(kg.store, FalkorDBStore) and kg.store.server is not None
    server = kg.store.server
    # Simulate an owner that vanished without stopping its server: drop only the lock.
    server._release_lock()
    pid = _server_pid(kg)
    async with await KG.open(home=home) as kg2:
        assert _wait_dead(pid)
        assert objects(await kg2.facts(subject="Alice")) == ["Seoul"]
    server.process = None
    await kg.store.close()


async def test_a_rollback_killed_mid_write_is_all_or_nothing(home: Path) -> None:
    """Kill the server while it runs a large rollback: after restart, fully before or after."""
    n = 1500
    kg = await KG.open(home=home)
    people = [f"P{i}" for i in range(n)]
    await kg.add_episode(
        source="facts", reference_time=t(2020), facts=[fact(p, "LIVES_IN", "Seoul") for p in people]
    )
    poison = await kg.add_episode(
        source="facts", reference_time=t(2022), facts=[fact(p, "LIVES_IN", "Busan") for p in people]
    )
    assert isinstance(kg.store, FalkorDBStore)
    store = kg.store
    await written_to_file(store)  # the kill below is for the rollback, not for these writes
    sent = asyncio.Event()
    real_write = store.execute

    async def write_and_signal(group_id: str, statements: list[Any], *fence: Any) -> Any:
        sent.set()
        return await real_write(group_id, statements, *fence)

    store.execute = write_and_signal  # type: ignore[method-assign]
    rollback = asyncio.create_task(kg.rollback(poison.episode_uuid, dry_run=False))
    await sent.wait()
    # The rewrite of 1,500 timelines runs ~300 ms on the build machine; 20 ms lands inside it.
    await asyncio.sleep(0.02)
    os.kill(_server_pid(kg), signal.SIGKILL)
    with contextlib.suppress(Exception):
        await rollback
    await kg.close()

    async with await KG.open(home=home) as after:
        homes = Counter(f.object for f in await after.facts(predicate="LIVES_IN", limit=10_000))
        [ep] = await after.store.episodes("default", [poison.episode_uuid])
        if ep.status == "rolled_back":
            assert homes == {"Seoul": n}
        else:
            assert homes == {"Busan": n}, homes
            # Not applied: the rollback can simply be run again.
            await after.rollback(poison.episode_uuid, dry_run=False)
            assert Counter(f.object for f in await after.facts(limit=10_000)) == {"Seoul": n}
        assert (await after.stats()).current_facts == n


@pytest.fixture
def stale_server(home: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A stand-in for a server left by a dead kg process: its command line names redis-server
    and the data directory, its pid is in the pidfile, and after SIGTERM it takes a second
    to exit, as a server flushing its AOF would."""
    data_dir = home.resolve() / "falkordb"
    data_dir.mkdir(parents=True)
    termed, ready = tmp_path / "termed", tmp_path / "ready"
    script = textwrap.dedent(f"""
        import pathlib, signal, sys, time
        def on_term(*_):
            pathlib.Path({str(termed)!r}).touch()
            time.sleep(1.0)
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_term)
        pathlib.Path({str(ready)!r}).touch()
        while True:
            time.sleep(0.01)
    """)
    stale = subprocess.Popen([sys.executable, "-c", script, "redis-server", str(data_dir)])
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    (data_dir / "redis.pid").write_text(str(stale.pid))
    yield stale, termed
    if stale.poll() is None:
        stale.kill()
        stale.wait()


async def test_reaping_a_stale_server_leaves_the_event_loop_running(
    home: Path, stale_server: tuple[subprocess.Popen[bytes], Path]
) -> None:
    """While kg waits for a stale server to exit, the process keeps serving its other
    tasks: no blocking sleep in async code."""
    stale, termed = stale_server
    server = EmbeddedServer(home)
    ran_while_reaping = False

    async def other_work() -> None:
        nonlocal ran_while_reaping
        while True:
            if termed.exists() and stale.poll() is None:
                ran_while_reaping = True
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(other_work())
    try:
        await server.start()
    finally:
        ticker.cancel()
        await server.stop()
    assert termed.exists() and stale.poll() == 0  # it was asked to stop, and did
    assert ran_while_reaping
