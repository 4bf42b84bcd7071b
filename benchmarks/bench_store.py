"""The store a benchmark runs on: `--backend falkordb|neo4j|both`, or a server at `--uri`.

- falkordb (the default): a throwaway embedded FalkorDB directory.
- neo4j: a throwaway Neo4j 5.26 Community dev server (docker/neo4j-dev/run, Java 17 and Maven;
  a fresh data directory, heap 512 MB and page cache 256 MB, the run script's defaults),
  started for the run and stopped after it. `KG_NEO4J_HEAP` and `KG_NEO4J_JAVA_OPTS` pass on.
- both: the whole benchmark once per backend, FalkorDB first, in one process.
- `--uri`: a server you run (bolt://user:password@host:port, falkordb://host:port). It must
  hold no group yet: a benchmark's groups would mix with others' (one Neo4j database holds
  every group), and the benchmark erases what it wrote when it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kg import KG
from kg.store.falkordb import FalkorDBStore

RUN = Path(__file__).resolve().parents[1] / "docker" / "neo4j-dev" / "run"
BACKENDS = ("falkordb", "neo4j")


def add_store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=(*BACKENDS, "both"),
        default="falkordb",
        help="falkordb: a throwaway embedded store; neo4j: a throwaway Neo4j 5.26 dev server; "
        "both: one run on each (default falkordb)",
    )
    parser.add_argument(
        "--uri",
        default=None,
        help="instead of --backend: a store URI (bolt://user:password@host:port, "
        "falkordb://host:port) holding no group yet",
    )


def run_per_backend(
    parser: argparse.ArgumentParser, main: Callable[[argparse.Namespace], Awaitable[None]]
) -> None:
    """Parse the command line, then run `main` once per chosen backend."""
    args = parser.parse_args()
    if args.uri:
        backends: tuple[str, ...] = ("uri",)
    else:
        backends = BACKENDS if args.backend == "both" else (args.backend,)
    for backend in backends:
        asyncio.run(main(argparse.Namespace(**{**vars(args), "backend": backend})))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DevServer:
    """docker/neo4j-dev/run on `data`: start() waits for its ready file; stop() sends SIGTERM
    (a clean shutdown with a checkpoint). The port is new on every start."""

    def __init__(self, data: Path, password: str, settings: list[str] | None = None) -> None:
        self.data, self.password, self.settings = data, password, settings or []
        self.proc: subprocess.Popen[bytes] | None = None
        self.uri = ""

    def start(self) -> DevServer:
        ready = self.data.parent / f"{self.data.name}.ready"
        ready.unlink(missing_ok=True)
        cmd = [
            str(RUN),
            "--port",
            str(_free_port()),
            "--password",
            self.password,
            "--data",
            str(self.data),
            "--ready-file",
            str(ready),
        ]
        for s in self.settings:
            cmd += ["--setting", s]
        log = self.data.parent / f"{self.data.name}.log"
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        while not ready.exists():
            if self.proc.poll() is not None:
                raise SystemExit(f"the Neo4j dev server exited; its log: {log}")
            time.sleep(0.1)
        self.uri = ready.read_text().strip().replace("bolt://", f"bolt://neo4j:{self.password}@")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.asynccontextmanager
async def bench_kg(args: argparse.Namespace, **kwargs: Any) -> AsyncIterator[KG]:
    """kg on the benchmark's store (args.backend, args.uri), emptied or removed at the end."""
    if args.uri:
        async with _on_server(args.uri, **kwargs) as kg:
            yield kg
        return
    with tempfile.TemporaryDirectory(prefix=f"kg-bench-{args.backend}-") as home:
        if args.backend == "falkordb":
            async with await KG.open(home=home, **kwargs) as kg:
                yield kg
            return
        server = DevServer(Path(home) / "neo4j", secrets.token_hex(8))
        try:
            await asyncio.to_thread(server.start)
            async with await KG.open(server.uri, **kwargs) as kg:
                assert server.proc is not None
                _SERVER_PIDS[id(kg)] = server.proc.pid
                try:
                    yield kg
                finally:
                    _SERVER_PIDS.pop(id(kg), None)
        finally:
            await asyncio.to_thread(server.stop)
            shutil.rmtree(Path(home) / "neo4j", ignore_errors=True)


_SERVER_PIDS: dict[int, int] = {}  # id(KG) -> the pid of the dev server bench_kg started for it


def server_pid(kg: KG) -> int | None:
    """The pid of the store's server process on this machine, when the benchmark started it
    (the embedded FalkorDB, the Neo4j dev server); None for a server at --uri."""
    if isinstance(kg.store, FalkorDBStore):
        server = kg.store.server
        return server.process.pid if server is not None and server.process is not None else None
    return _SERVER_PIDS.get(id(kg))


def cpu_seconds(pid: int | None) -> float:
    """CPU seconds (user + system) process `pid` has used, from /proc; 0 for None."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.asynccontextmanager
async def _on_server(uri: str, **kwargs: Any) -> AsyncIterator[KG]:
    async with await KG.open(uri, **kwargs) as kg:
        if found := await kg.groups():
            raise SystemExit(
                f"{where(uri)} already holds groups {found[:5]}: benchmarks need "
                "an empty database (they erase what they write)"
            )
        try:
            yield kg
        finally:
            for group in await kg.groups():
                await kg.erase_group(group)


def where(uri: str | None) -> str:
    """The store, named without credentials."""
    if not uri:
        return "embedded FalkorDB (throwaway directory)"
    u = urlparse(uri)
    return f"{u.scheme}://{u.hostname}" + (f":{u.port}" if u.port else "")


async def describe(kg: KG, args: argparse.Namespace) -> str:
    """The store and its server version, for the benchmark's header."""
    if isinstance(kg.store, FalkorDBStore):
        info = await kg.store.client.connection.info("server")
        return f"{where(args.uri)}, redis {info.get('redis_version')} + FalkorDB"
    [row] = await kg.store.raw_query(
        "",
        "CALL dbms.components() YIELD name, versions, edition "
        "RETURN name + ' ' + versions[0] + ' ' + edition AS v",
    )
    name = where(args.uri) if args.uri else "throwaway dev server (docker/neo4j-dev)"
    return f"{name}, {row['v']}"


async def ping(kg: KG) -> None:
    """The bare round trip to the server: the floor under every query."""
    if isinstance(kg.store, FalkorDBStore):
        await kg.store.client.connection.ping()
    else:
        await kg.store.raw_query("", "RETURN 1")
