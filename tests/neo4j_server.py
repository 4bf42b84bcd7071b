"""A Neo4j 5.26 Community server for the test session, from docker/neo4j-dev/run (no Docker).

One server per pytest run, started on first use (tests that never ask for it never pay), on a
free 127.0.0.1 port, with its data in a temporary directory that is removed afterwards. Without
Java or Maven the Neo4j tests skip and say which is missing; with `CI` set, a Neo4j that cannot
start fails them instead. `KG_TEST_NEO4J_URI` (+ `NEO4J_PASSWORD`, and `KG_TEST_NEO4J_DATA` for
its data directory) points the tests at a server you run yourself instead (its database is
wiped between tests: never point it at real data).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

RUN = Path(__file__).resolve().parent.parent / "docker" / "neo4j-dev" / "run"
START_TIMEOUT = float(os.environ.get("KG_TEST_NEO4J_TIMEOUT", "600"))  # first run resolves jars
# C1 only: for a server that lives one test run, about a third less JVM CPU (measured on
# tests/test_neo4j_live.py) than letting C2 compile the Cypher runtime.
JAVA_OPTS = os.environ.get("KG_NEO4J_JAVA_OPTS", "-XX:TieredStopAtLevel=1")
MISSING_TOOL = 3  # docker/neo4j-dev/run's exit code when java or mvn is not installed


@dataclass(frozen=True)
class Neo4jServer:
    uri: str  # bolt://127.0.0.1:PORT, no credentials
    password: str
    user: str = "neo4j"
    data: Path | None = None  # the server's directory, when this session started it

    @property
    def kg_uri(self) -> str:
        """The URI kg's store takes, with credentials in it."""
        scheme, rest = self.uri.split("://", 1)
        return f"{scheme}://{self.user}:{self.password}@{rest}"

    def driver(self) -> Any:
        """A synchronous driver for test plumbing, one per server for the session."""
        if self.uri not in _DRIVERS:
            import neo4j

            _DRIVERS[self.uri] = neo4j.GraphDatabase.driver(
                self.uri, auth=(self.user, self.password), notifications_min_severity="OFF"
            )
        return _DRIVERS[self.uri]

    def empty(self) -> None:
        """Delete every node, every index and constraint kg did not create (other tools',
        such as graphiti-core's, and tests'), and kg's vector indexes (the next test may
        embed with another dimension). kg's other schema stays, as on a server kg has used
        before: the tests see both a fresh schema (vector) and a reused one (the rest)."""
        with self.driver().session() as session:
            session.run("MATCH (n) DETACH DELETE n").consume()
            for r in session.run(
                "SHOW CONSTRAINTS YIELD name WHERE NOT name STARTS WITH 'kg_' RETURN name"
            ):
                session.run(f"DROP CONSTRAINT `{r['name']}`").consume()
            for r in session.run(
                "SHOW INDEXES YIELD name, type, owningConstraint WHERE type <> 'LOOKUP' AND "
                "owningConstraint IS NULL AND (NOT name STARTS WITH 'kg_' OR type = 'VECTOR') "
                "RETURN name"
            ):
                session.run(f"DROP INDEX `{r['name']}`").consume()


_DRIVERS: dict[str, Any] = {}


def _unavailable(reason: str) -> None:
    """Skip, or fail where CI promises a Neo4j."""
    if os.environ.get("CI"):
        pytest.fail(f"Neo4j tests cannot run, and CI is set: {reason}", pytrace=False)
    pytest.skip(f"Neo4j tests skipped: {reason}")


def _missing_tools() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    java = shutil.which(str(Path(java_home) / "bin" / "java")) if java_home else None
    if not (java or shutil.which("java")):
        return "java not found (install a JDK 17 or 21, or set JAVA_HOME)"
    if not shutil.which("mvn"):
        return "mvn not found (install Maven; it resolves Neo4j's jars once into ~/.m2)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    # In the child before exec (the run script execs the JVM): a killed pytest takes it along.
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no output)"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()  # the launcher checkpoints and shuts the DBMS down cleanly
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _start(workdir: Path, password: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start the dev server; retry on another port if ours was taken meanwhile."""
    for attempt in range(3):
        log, ready = workdir / f"launcher-{attempt}.log", workdir / "ready"
        port = _free_port()
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [
                    str(RUN),
                    "--port",
                    str(port),
                    "--password",
                    password,
                    "--data",
                    str(workdir / "data"),
                    "--ready-file",
                    str(ready),
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                preexec_fn=_die_with_parent,
                env={**os.environ, "KG_NEO4J_JAVA_OPTS": JAVA_OPTS},
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if ready.exists():
                return proc, ready.read_text().strip()
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        else:
            _stop(proc)
            _unavailable(f"Neo4j not ready in {START_TIMEOUT:.0f}s; log:\n{_tail(log)}")
        if proc.returncode == MISSING_TOOL:
            _unavailable(_tail(log, 1))
        if "Address already in use" not in _tail(log, 200) or attempt == 2:
            _unavailable(f"Neo4j exited with code {proc.returncode}; log:\n{_tail(log)}")
    raise AssertionError("unreachable")


@contextlib.contextmanager
def neo4j_server() -> Iterator[Neo4jServer]:
    if uri := os.environ.get("KG_TEST_NEO4J_URI"):
        yield Neo4jServer(
            uri=uri,
            password=os.environ.get("NEO4J_PASSWORD", ""),
            data=Path(d) if (d := os.environ.get("KG_TEST_NEO4J_DATA")) else None,
        )
        if (driver := _DRIVERS.pop(uri, None)) is not None:
            driver.close()
        return
    if missing := _missing_tools():
        _unavailable(missing)
    workdir = Path(tempfile.mkdtemp(prefix="kg-neo4j-test-"))
    password = secrets.token_hex(12)
    try:
        proc, uri = _start(workdir, password)
        try:
            yield Neo4jServer(uri=uri, password=password, data=workdir / "data")
        finally:
            if (driver := _DRIVERS.pop(uri, None)) is not None:
                driver.close()
            _stop(proc)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
