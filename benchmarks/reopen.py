"""Reopen time of the embedded store against its size and its history.

    python benchmarks/reopen.py [--sizes 10000 100000 1000000] [--facts-per-episode 10]
                                [--big-episode 20000] [--baseline 10000] [--repeats 3]

The store is filled through kg's real write path (`KG.add_episode`, one structured episode
at a time: planning reads, one atomic write each) up to each size in turn; at each size:

- **clean reopen**: close (which folds a long command log into the RDB base), then open, a
  few times: the median and the spread;
- **crash reopen**: a few more episodes, the server SIGKILLed (no close, no fold), then open:
  the server replays the command log written since redis's last automatic fold;
- the AOF's base and incremental parts, and the lines in redis.log.

`--baseline N` fills a second store to N facts with the settings kg had before (no automatic
rewrite, no fold on close or after a replay) and reopens it: the whole history is replayed.
`--big-episode N` writes one episode of N facts into a fresh store and reopens it, cleanly and
after a crash. The ratio to watch: reopen time against data size, and against history.

`--vectors N [N ...]` measures stores of N facts *with* 384-d embeddings (what the default
hybrid recipe needs), which FalkorDB must index again at every load: each store is bulk-written
in kg's schema (search_latency.py's loader: real all-MiniLM-L6-v2 embeddings of the distinct
template sentences, each fact's with a little noise; 5,000+ people), folded into its RDB base
and kept under `--home` (reused when it is there: a million facts with vectors take about 20
minutes of both cores to write). Per size and mode, `--repeats` times: the reopen (`KG.open`),
then until a facts lookup by subject answers (as-of), until a full-text search of the facts
answers, and until every index is built (the full hybrid search); after a clean close, and
after a SIGKILLed server (no close, no fold). `--before` runs the same with the server settings
kg had before (indexes built inside the load) for comparison, in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kg import KG
from kg.store.falkordb import FalkorDBStore, persistence
from kg.store.falkordb.embedded import EmbeddedServer

START = datetime(2015, 1, 1, tzinfo=UTC)


def episode(e: int, per_episode: int, people: int, rng: random.Random) -> dict[str, Any]:
    facts = []
    for _ in range(per_episode):
        person = f"Person {rng.randrange(people)}"
        roll = rng.random()
        if roll < 0.3:
            facts.append(
                {"subject": person, "predicate": "LIVES_IN", "object": f"City {rng.randrange(200)}"}
            )
        else:
            facts.append(
                {
                    "subject": person,
                    "predicate": "KNOWS",
                    "object": f"Person {rng.randrange(people)}",
                }
            )
    return {"source": "facts", "reference_time": START + timedelta(minutes=e), "facts": facts}


def aof_parts(home: Path) -> tuple[int, int]:
    """(base bytes, incremental bytes) of the multi-part AOF."""
    base = incr = 0
    for f in (home / "falkordb" / "appendonlydir").glob("*"):
        if ".base." in f.name:
            base += f.stat().st_size
        elif ".incr." in f.name:
            incr += f.stat().st_size
    return base, incr


def log_lines(home: Path) -> int:
    try:
        return len((home / "falkordb" / "redis.log").read_bytes().splitlines())
    except OSError:
        return 0


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


async def timed_open(home: Path) -> tuple[KG, float]:
    t0 = time.perf_counter()
    kg = await KG.open(home=home)
    return kg, time.perf_counter() - t0


async def indexes_ready(kg: KG, group: str = "default") -> float:
    """Seconds until every index of the group is OPERATIONAL: FalkorDB rebuilds full-text
    and vector indexes in the background after loading, and search waits for them."""
    assert isinstance(kg.store, FalkorDBStore)
    t0 = time.perf_counter()
    while True:
        if all(s == "OPERATIONAL" for s in await kg.store.index_statuses(group)):
            return time.perf_counter() - t0
        await asyncio.sleep(0.05)


async def fill(kg: KG, start: int, end: int, per: int, people: int, rng: random.Random) -> float:
    t0 = time.perf_counter()
    for e in range(start, end):
        await kg.add_episode(**episode(e, per, people, rng))
        if (e - start) % 2000 == 1999:
            rate = (e - start + 1) * per / (time.perf_counter() - t0)
            print(f"  ... {(e + 1) * per:,} facts ({rate:.0f} facts/s)", flush=True)
    return time.perf_counter() - t0


async def crash(kg: KG) -> None:
    """SIGKILL the server (no clean close, no fold), then let kg notice."""
    assert isinstance(kg.store, FalkorDBStore) and kg.store.server is not None
    pid = kg.store.server.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    if kg.store.server.process is not None:
        await asyncio.to_thread(kg.store.server.process.wait)
    await kg.close()


async def measure(
    home: Path,
    kg: KG,
    args: argparse.Namespace,
    label: str,
    people: int,
    rng: random.Random,
    next_episode: int,
) -> tuple[KG, int]:
    repeats, extra, per = args.repeats, args.crash_episodes, args.facts_per_episode
    t0 = time.perf_counter()
    await kg.close()
    close_s = time.perf_counter() - t0
    base, incr = aof_parts(home)
    times, ready = [], []
    for _ in range(repeats):
        kg, took = await timed_open(home)
        times.append(took)
        ready.append(took + await indexes_ready(kg))
        await kg.close()
    kg, _ = await timed_open(home)
    await fill(kg, next_episode, next_episode + extra, per, people, rng)
    crash_base, crash_incr = aof_parts(home)
    await crash(kg)
    kg, crash_s = await timed_open(home)
    spread = f"{min(times):.2f}-{max(times):.2f}"
    print(
        f"| {label} | {statistics.median(times):.2f} s ({spread}) | "
        f"{statistics.median(ready):.2f} s | {close_s:.2f} s | "
        f"{mb(base)} + {mb(incr)} | {crash_s:.2f} s | {mb(crash_base)} + {mb(crash_incr)} | "
        f"{log_lines(home)} |",
        flush=True,
    )
    return kg, next_episode + extra


async def grow(args: argparse.Namespace) -> None:
    rng = random.Random(7)
    per = args.facts_per_episode
    people = max(10, max(args.sizes) // 20)
    print("\n## Many small episodes\n")
    print(
        f"{per} facts per episode. Reopen after a clean close (median of {args.repeats}, "
        "range), the same until the search indexes are rebuilt (median), the close's own "
        "time, AOF base + incremental after the close, reopen after "
        f"{args.crash_episodes} more episodes and a SIGKILLed server, the AOF then, and "
        "redis.log lines at the end.\n"
    )
    print(
        "| facts | clean reopen | search indexes ready | close | AOF after close | "
        "crash reopen | AOF at crash | redis.log lines |"
    )
    print("|---|---|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory(prefix="kg-reopen-") as tmp:
        home = Path(tmp)
        kg = await KG.open(home=home)
        episodes = 0
        for size in sorted(args.sizes):
            target = size // per
            took = await fill(kg, episodes, target, per, people, rng)
            print(f"  filled to {size:,} facts in {took:.0f} s", flush=True)
            episodes = target
            kg, episodes = await measure(home, kg, args, f"{size:,}", people, rng, episodes)
        await kg.close()


async def baseline(args: argparse.Namespace) -> None:
    """The settings kg had before: every command kept, replayed at every start."""
    rng = random.Random(7)
    per = args.facts_per_episode
    saved = (EmbeddedServer.extra_args, persistence.fold)

    async def never(*_: Any, **__: Any) -> bool:
        return False

    EmbeddedServer.extra_args = ("--auto-aof-rewrite-percentage", "0")
    persistence.fold = never
    try:
        with tempfile.TemporaryDirectory(prefix="kg-reopen-base-") as tmp:
            home = Path(tmp)
            kg = await KG.open(home=home)
            took = await fill(kg, 0, args.baseline // per, per, max(10, args.baseline // 20), rng)
            await kg.close()
            base, incr = aof_parts(home)
            kg, reopen = await timed_open(home)
            await kg.close()
            print(
                f"\nBaseline (old settings), {args.baseline:,} facts: written in {took:.0f} s, "
                f"AOF {mb(base)} + {mb(incr)}, reopen {reopen:.2f} s (the whole history "
                "replayed)",
                flush=True,
            )
    finally:
        EmbeddedServer.extra_args, persistence.fold = saved


async def big_episode(args: argparse.Namespace) -> None:
    rng = random.Random(11)
    n = args.big_episode
    with tempfile.TemporaryDirectory(prefix="kg-reopen-big-") as tmp:
        home = Path(tmp)
        kg = await KG.open(home=home)
        t0 = time.perf_counter()
        await kg.add_episode(**episode(0, n, max(10, n // 5), rng))
        took = time.perf_counter() - t0
        base, incr = aof_parts(home)
        await crash(kg)
        kg, crash_s = await timed_open(home)
        t0 = time.perf_counter()
        await kg.close()
        close_s = time.perf_counter() - t0
        kg, clean_s = await timed_open(home)
        await kg.close()
        after_base, after_incr = aof_parts(home)
        print(
            f"\nOne episode of {n:,} facts: written in {took:.1f} s (AOF {mb(base)} + "
            f"{mb(incr)}); reopen after a SIGKILLed server {crash_s:.2f} s; close "
            f"{close_s:.2f} s; clean reopen {clean_s:.2f} s (AOF {mb(after_base)} + "
            f"{mb(after_incr)}); redis.log {log_lines(home)} lines",
            flush=True,
        )


async def vector_store(home: Path, size: int) -> None:
    """A store of `size` facts with embeddings under `home`, written unless it is there."""
    from search_latency import PEOPLE, Bulk

    from kg.ingest.embeddings import local_minilm

    if (home / "falkordb" / "appendonlydir").exists():
        return
    embedder = local_minilm()
    rng = random.Random(7)
    people = PEOPLE + [f"Person {i}" for i in range(5000)]
    from search_latency import template

    sentences = list(dict.fromkeys(template(rng, people)[3] for _ in range(9000)))[:3000]
    vectors = dict(zip(sentences, await embedder.embed(sentences), strict=True))
    async with await KG.open(home=home, embedder=embedder) as kg:
        group = "default"
        await kg.store.ensure_schema(group)
        bulk = Bulk(kg, group, embedder.dim)
        await bulk.write_bases(vectors)
        t0 = time.perf_counter()
        await bulk.fill(0, size, people, vectors, random.Random(size))
        await kg.store.raw_query(group, "MATCH (b:BenchBase) DELETE b", write=True)
        await indexes_ready(kg, group)
        print(
            f"  wrote {size:,} facts with vectors in {time.perf_counter() - t0:.0f} s", flush=True
        )
    base, incr = aof_parts(home)
    print(f"  AOF after close: {mb(base)} + {mb(incr)}", flush=True)


async def until(check: Any) -> float:
    """Seconds until `check()` returns without raising StoreError (an index still building)."""
    from kg.errors import StoreError

    t0 = time.perf_counter()
    while True:
        try:
            await check()
            return time.perf_counter() - t0
        except StoreError:
            await asyncio.sleep(0.05)


async def vector_reopen(home: Path, kill: bool) -> tuple[float, float, float, float]:
    """(reopen, as-of answered, full-text answered, every index built), in seconds from the
    start of `KG.open`; with `kill`, the server is SIGKILLed first (after one more write)."""
    from kg.schemas.search import Scope, SearchView
    from kg.store.falkordb import store as falkordb_store

    if kill:
        kg = await KG.open(home=home)
        await kg.add_episode(**episode(10**6, 1, 100, random.Random(1)))
        await crash(kg)
    saved = falkordb_store.INDEX_WAIT_SECONDS
    falkordb_store.INDEX_WAIT_SECONDS = 0.5  # ask again, rather than wait inside the store
    try:
        t0 = time.perf_counter()
        kg = await KG.open(home=home)
        opened = time.perf_counter() - t0
        asof = opened + await until(lambda: kg.facts(subject="Minji Kim"))
        assert isinstance(kg.store, FalkorDBStore)
        store = kg.store
        now = START + timedelta(days=10**4)
        view = SearchView(valid_at=now, known_at=now)
        text = time.perf_counter() - t0
        text += await until(
            lambda: store.search_text("default", Scope.facts, "lives Seoul", view, 10)
        )
        built = time.perf_counter() - t0 + await indexes_ready(kg)
    finally:
        falkordb_store.INDEX_WAIT_SECONDS = saved
    await kg.close()
    return opened, asof, text, built


async def vectors(args: argparse.Namespace) -> None:
    print("\n## Stores with 384-d embeddings\n")
    print(f"Seconds from the start of KG.open; median of {args.repeats} (range).\n")
    print(
        "| facts | settings | reopen | | as-of answers | full-text answers | "
        "every index built | AOF base + log |"
    )
    print("|---|---|---|---|---|---|---|---|", flush=True)
    root = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="kg-reopen-vec-"))
    saved = EmbeddedServer.args
    for size in sorted(args.vectors):
        home = root / f"vectors-{size}"
        await vector_store(home, size)
        settings = ["after", "before"] if args.before else ["after"]
        for name in settings:
            if name == "before":  # the server as kg started it before: indexes built in the load

                def old(self: EmbeddedServer) -> list[str]:
                    args = saved(self)
                    return [
                        *args[: args.index("DELAY_INDEXING")],
                        *args[args.index("DELAY_INDEXING") + 2 :],
                    ]

                EmbeddedServer.args = old  # type: ignore[method-assign]
            try:
                for kill in (False, True):
                    runs = [await vector_reopen(home, kill) for _ in range(args.repeats)]
                    base, incr = aof_parts(home)
                    cells = []
                    for i in range(4):
                        xs = [r[i] for r in runs]
                        cells.append(f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})")
                    how = "after a kill" if kill else "clean"
                    print(
                        f"| {size:,} | {name} | {cells[0]} | {how} | {cells[1]} | {cells[2]} "
                        f"| {cells[3]} | {mb(base)} + {mb(incr)} |",
                        flush=True,
                    )
            finally:
                EmbeddedServer.args = saved  # type: ignore[method-assign]
    print(f"\nload average {os.getloadavg()}; stores kept under {root}", flush=True)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--facts-per-episode", type=int, default=10)
    ap.add_argument("--crash-episodes", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline", type=int, default=0, help="facts for the old-settings run")
    ap.add_argument("--big-episode", type=int, default=0, help="facts in the one-episode run")
    ap.add_argument(
        "--vectors",
        type=int,
        nargs="*",
        default=[],
        help="facts in stores with embeddings (no --sizes run then)",
    )
    ap.add_argument("--home", default=None, help="where to keep (and reuse) the vector stores")
    ap.add_argument(
        "--before",
        action="store_true",
        help="also reopen with the old server settings (indexes built in the load)",
    )
    args = ap.parse_args()
    if args.vectors:
        await vectors(args)
        return
    if args.baseline:
        await baseline(args)
    if args.big_episode:
        await big_episode(args)
    if args.sizes:
        await grow(args)


if __name__ == "__main__":
    asyncio.run(main())
