"""Start and stop times, and idle memory, of kg's Neo4j dev server (docker/neo4j-dev/run).

    python benchmarks/neo4j_dev_start.py [--runs N] [--cold]

Each run starts the server on a fresh data directory and a free port, waits for its ready file
(Bolt accepting, password set), runs one query over Bolt, waits 10 s, reads the JVM's RSS from
/proc, then stops it with SIGTERM and times the exit. Warm runs use the cached classpath
(~/.cache/kg-neo4j-dev) and jars (~/.m2). `--cold` first resolves everything from scratch into
throwaway directories (a private Maven repository and cache; Maven Central must be reachable)
and times that first start separately. Figures are per run, then median and spread.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN = Path(__file__).resolve().parents[1] / "docker" / "neo4j-dev" / "run"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_run(env: dict[str, str], idle: float) -> tuple[float, float, float]:
    """(seconds to ready, idle RSS in MB, seconds to stop)."""
    import neo4j

    work = Path(tempfile.mkdtemp(prefix="kg-neo4j-bench-"))
    password = secrets.token_hex(8)
    ready = work / "ready"
    log = open(work / "log", "wb")  # noqa: SIM115 - closed below
    start = time.monotonic()
    proc = subprocess.Popen(
        [
            str(RUN),
            "--port",
            str(free_port()),
            "--password",
            password,
            "--data",
            str(work / "data"),
            "--ready-file",
            str(ready),
        ],
        stdout=log,
        stderr=log,
        env=env,
    )
    try:
        while not ready.exists():
            if proc.poll() is not None:
                raise SystemExit(f"server exited: {(work / 'log').read_text()[-2000:]}")
            time.sleep(0.05)
        to_ready = time.monotonic() - start
        uri = ready.read_text().strip()
        with neo4j.GraphDatabase.driver(uri, auth=("neo4j", password)) as driver:
            driver.execute_query("RETURN 1")
        time.sleep(idle)
        rss = rss_mb(proc.pid)
        stop = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        return to_ready, rss, time.monotonic() - stop
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def summary(name: str, values: list[float], unit: str) -> str:
    spread = f"{min(values):.1f}-{max(values):.1f}" if len(values) > 1 else "-"
    return f"{name:<16} median {statistics.median(values):7.1f} {unit}  (min-max {spread})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="time a first start from nothing too")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds idle before reading RSS")
    args = ap.parse_args()
    env = dict(os.environ)
    scratch = None
    if args.cold:
        scratch = Path(tempfile.mkdtemp(prefix="kg-neo4j-cold-"))
        env["MAVEN_OPTS"] = f"{env.get('MAVEN_OPTS', '')} -Dmaven.repo.local={scratch / 'm2'}"
        env["XDG_CACHE_HOME"] = str(scratch / "cache")
    try:
        if args.cold:
            ready, rss, stop = one_run(env, args.idle)
            print(
                f"cold start (resolve jars, compile launcher, start): {ready:.1f} s to ready, "
                f"{rss:.0f} MB RSS idle, {stop:.1f} s to stop"
            )
        runs = [one_run(env, args.idle) for _ in range(args.runs)]
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    for i, (ready, rss, stop) in enumerate(runs, 1):
        print(f"warm run {i}: {ready:.1f} s to ready, {rss:.0f} MB RSS idle, {stop:.1f} s to stop")
    print(summary("warm to ready", [r[0] for r in runs], "s"))
    print(summary("idle RSS", [r[1] for r in runs], "MB"))
    print(summary("stop (SIGTERM)", [r[2] for r in runs], "s"))
    print(f"load average during the runs: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
