"""Several kg processes on one store server: queue workers' episodes/s and searchers' QPS.

    python benchmarks/scale_out.py --uri bolt://neo4j:PASSWORD@host:port
        [--processes 1 2 4] [--episodes 600] [--groups 8] [--seconds 30]

For each process count N, on the server at `--uri` (it must hold no group; the run erases
what it writes):
1. ingest: `--episodes` structured episodes (5 facts each, benchmarks/ingest_throughput.py's
   people) over `--groups` groups are queued (`add_episodes(wait=False)`, not timed), then N
   `kg --uri URI worker --all-groups --drain` processes are started at once; the time until
   the last exits (process start included), and every episode checked ingested, gives
   episodes/s. A worker works one group at a time; groups run in parallel across workers.
2. search: N processes each run the default search (no embedder: full-text and graph
   branches) on random questions over those groups for `--seconds`, all starting together
   after their imports; total searches / seconds is the QPS. These are kg's search path in
   N processes (what N `kg serve` processes run per request), without HTTP in front.
Printed: a table of N against episodes/s and QPS, with the load average during each, and
what explains the curve: the CPU seconds the workers (their process start included) and the
store server (`--server-pid`, read from /proc) spent per episode while draining.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.ingest_throughput import make_episodes
from kg import KG

QUESTIONS = [
    "Where does Person 3 live?",
    "Who works at Company 7?",
    "Person 12's friends",
    "Who lives in City 5?",
    "Which company employs Person 40?",
    "Person 8 knows whom?",
]


async def enqueue(uri: str, n: int, groups: int, tag: str) -> None:
    episodes = make_episodes(n * 5, 5, random.Random(1))
    async with await KG.open(uri) as kg:
        await kg.add_episodes(
            [{**e, "group_id": f"{tag}-{i % groups}"} for i, e in enumerate(episodes)], wait=False
        )


async def ingested(uri: str, groups: int, tag: str) -> int:
    async with await KG.open(uri) as kg:
        total = 0
        for g in range(groups):
            total += (await kg.stats(group_id=f"{tag}-{g}")).episodes
        return total


async def erase(uri: str) -> None:
    async with await KG.open(uri) as kg:
        for group in await kg.groups():
            await kg.erase_group(group)


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def server_cpu(pid: int | None) -> float:
    """CPU seconds of the store server's process so far (0 without a pid)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def workers(uri: str, n: int) -> float:
    kg_cli = str(Path(sys.executable).parent / "kg")
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [kg_cli, "--uri", uri, "worker", "--all-groups", "--drain"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(n)
    ]
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"a worker failed: {err.decode()[-2000:]}")
    return time.perf_counter() - t0


async def search_child(uri: str, groups: int, tag: str, start_at: float, seconds: float) -> None:
    rng = random.Random(os.getpid())
    async with await KG.open(uri) as kg:
        await kg.search("warm up", group_id=f"{tag}-0")
        await asyncio.sleep(max(0.0, start_at - time.time()))
        done, until = 0, start_at + seconds
        while time.time() < until:
            await kg.search(rng.choice(QUESTIONS), group_id=f"{tag}-{rng.randrange(groups)}")
            done += 1
    print(done, flush=True)


def searchers(uri: str, n: int, groups: int, tag: str, seconds: float) -> float:
    start_at = time.time() + 15  # imports and the first connection first
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--child",
                uri,
                str(groups),
                tag,
                str(start_at),
                str(seconds),
            ],
            stdout=subprocess.PIPE,
        )
        for _ in range(n)
    ]
    total = 0
    for p in procs:
        out, _ = p.communicate()
        if p.returncode:
            raise SystemExit("a searcher failed")
        total += int(out.decode().split()[-1])
    return total / seconds


def main(args: argparse.Namespace) -> None:
    asyncio.run(erase(args.uri))
    rows = []
    for n in args.processes:
        tag = f"scale{n}"
        asyncio.run(enqueue(args.uri, args.episodes, args.groups, tag))
        load0 = os.getloadavg()[0]
        cpu0, srv0 = children_cpu(), server_cpu(args.server_pid)
        took = workers(args.uri, n)
        cpu = (children_cpu() - cpu0) / args.episodes * 1000
        srv = (server_cpu(args.server_pid) - srv0) / args.episodes * 1000
        got = asyncio.run(ingested(args.uri, args.groups, tag))
        if got != args.episodes:
            raise SystemExit(f"{got} of {args.episodes} episodes ingested with {n} workers")
        load1 = os.getloadavg()[0]
        qps = searchers(args.uri, n, args.groups, tag, args.seconds)
        load2 = os.getloadavg()[0]
        rows.append((n, args.episodes / took, cpu, srv, qps, load0, load1, load2))
        print(
            f"{n} processes: {args.episodes / took:.1f} episodes/s ({took:.0f} s; CPU ms per "
            f"episode: workers {cpu:.0f}, server {srv:.0f}), {qps:.1f} searches/s; "
            f"load {load0:.1f} / {load1:.1f} / {load2:.1f}",
            flush=True,
        )
        asyncio.run(erase(args.uri))
    print(
        "\n| processes | episodes/s (workers) | CPU ms / episode, workers + server | searches/s "
        "| load average |\n|---|---|---|---|---|"
    )
    for n, eps, cpu, srv, qps, *loads in rows:
        print(
            f"| {n} | {eps:.1f} | {cpu:.0f} + {srv:.0f} | {qps:.1f} "
            f"| {'-'.join(f'{x:.0f}' for x in loads)} |"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        uri, groups, tag, start_at, seconds = sys.argv[2:7]
        asyncio.run(search_child(uri, int(groups), tag, float(start_at), float(seconds)))
        sys.exit(0)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--uri", required=True, help="the store server (it must hold no group)")
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--episodes", type=int, default=600)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument(
        "--server-pid", type=int, help="the store server's pid, to count its CPU (Linux /proc)"
    )
    main(ap.parse_args())
