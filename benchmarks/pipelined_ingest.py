"""Wall time to ingest one 600-turn LoCoMo conversation through an LLM that answers in 1 s:
kg one by one, kg in the background (pipelined), graphiti-core's add_episode loop and its
add_episode_bulk, all against the same stub server, in one run.

    python benchmarks/pipelined_ingest.py [DATA_DIR] [--turns 600] [--latency 1.0]
        [--concurrency 8] [--graphiti-loop-turns N] [--repeats R] [--stub-port P]

The stub (benchmarks/llm_stub.py) is a real HTTP server that answers every request after
`--latency` seconds, scripted from the request's schema. Every client may keep
`--concurrency` requests in flight (kg's OpenAILLM(max_concurrency=), Graphiti's
max_coroutines), so no path can beat concurrency / latency episodes per second at one call
an episode; the figures say how close each comes. kg runs with no embedder (Graphiti needs
one: a hash embedder, no model, costs it nothing).

- kg sequential: `add_episode` per turn, waiting (today's path: one call, then the write).
- kg background: `add_episode(wait=False)` per turn (timed apart), then `Worker.drain()`:
  extraction calls pipelined `--concurrency` at a time, writes in order. `--repeats R` runs
  it R times (each into a new group, each compared with the sequential one): the median,
  with the range.
- LLM client alone: the same extraction calls through the same client, `--concurrency` in
  flight, nothing else: what this machine's client and stub can do (their own overhead on
  top of `--latency`), measured beside kg so its figure can be read as a share of it.
- Graphiti loop: `add_episode` per turn, waiting. At 1 s a call and ~3 calls an episode it
  takes most of an hour for 600 turns: `--graphiti-loop-turns N` runs the first N turns and
  the table extrapolates (marked).
- Graphiti bulk: `add_episode_bulk` with every turn.

The turns are message episodes with reference time = session time + the turn's index in
seconds. After the kg runs, the two kg groups are compared: the facts true at every session
date and now, and every version with its provenance (episodes named by turn), must be equal.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graphiti_core.embedder.client import EmbedderClient

from benchmarks.graphiti_llm import Counts, graphiti
from kg import KG
from kg.ingest.extraction import extract
from kg.ingest.llm import OpenAILLM
from kg.queue import Worker
from kg.schemas.episode import Episode
from kg.schemas.ontology import DEFAULT_ONTOLOGY
from kg.store.falkordb import FalkorDBStore

HERE = Path(__file__).resolve().parent


class HashEmbedder(EmbedderClient):
    """Graphiti needs an embedder; this one costs nothing (sha256 bytes, unit length)."""

    dim = 384

    async def create(self, input_data: Any) -> list[float]:
        text = input_data if isinstance(input_data, str) else str(next(iter(input_data), ""))
        return self._vec(text)

    async def create_batch(self, input_data_list: list[str]) -> list[list[float]]:
        return [self._vec(t) for t in input_data_list]

    def _vec(self, text: str) -> list[float]:
        raw = b"".join(hashlib.sha256(f"{i}{text}".encode()).digest() for i in range(12))
        v = [b - 127.5 for b in raw[: self.dim]]
        n = sum(x * x for x in v) ** 0.5
        return [x / n for x in v]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_stub(latency: float, port: int | None = None) -> tuple[subprocess.Popen[bytes], str]:
    port = port or free_port()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "llm_stub.py"), "--port", str(port), "--latency", str(latency)]
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{url}/v1/models", timeout=1).read()
            return proc, url + "/v1"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the stub server did not start")


def stub_stats(base_url: str, reset: bool = False) -> dict[str, int]:
    url = base_url.removesuffix("/v1") + ("/stats/reset" if reset else "/stats")
    req = urllib.request.Request(url, method="POST" if reset else "GET")
    return dict(json.loads(urllib.request.urlopen(req, timeout=5).read()))


def load_turns(data_dir: str, n: int) -> tuple[str, list[dict[str, Any]]]:
    data = json.loads((Path(data_dir) / "locomo" / "locomo_dev.json").read_text())
    sizes: dict[str, int] = {}
    for e in data["episodes"]:
        sizes[e["conv"]] = sizes.get(e["conv"], 0) + 1
    conv = next(c for c in sorted(sizes) if sizes[c] >= n)
    return conv, [e for e in data["episodes"] if e["conv"] == conv][:n]


def when(e: dict[str, Any], i: int) -> datetime:
    return datetime.fromisoformat(e["valid_at"]).replace(tzinfo=UTC) + timedelta(seconds=i)


def episode(group: str, e: dict[str, Any], i: int) -> Episode:
    return Episode(
        source="message",
        group_id=group,
        content=f"{e['speaker']}: {e['text']}",
        reference_time=when(e, i),
        source_description=f"locomo {e['dia_id']}",
    )


async def as_of(kg: KG, group: str, dates: list[datetime]) -> dict[str, Any]:
    """The as-of answers and every version, episodes named by turn (uuids differ per run)."""
    rows = await kg.store.raw_query(
        group, "MATCH (e:Episodic) RETURN e.uuid AS u, e.source_description AS d"
    )
    turn = {r["u"]: r["d"] for r in rows}
    views = []
    for d in [*dates, None]:
        facts = await kg.facts(group_id=group, valid_at=d, limit=100_000)
        views.append(sorted(f"{f.subject} {f.predicate} {f.object}" for f in facts))
    versions = sorted(
        repr(
            (
                f.subject,
                f.predicate,
                f.object,
                f.edge.valid_at,
                f.edge.invalid_at,
                f.edge.expired_at is None,
                [turn[u] for u in f.edge.episodes],
                turn.get(f.edge.invalidated_by or ""),
            )
        )
        for f in await kg.history(group_id=group, limit=100_000)
    )
    return {"views": views, "versions": versions}


async def run(args: argparse.Namespace) -> None:
    conv, turns = load_turns(args.data, args.turns)
    n, c, lat = len(turns), args.concurrency, args.latency
    limit = c / lat
    print(f"load average at the start: {load()}", file=sys.stderr, flush=True)
    proc, base_url = start_stub(lat, args.stub_port)
    table: list[tuple[str, float, int, str]] = []
    try:
        llm = OpenAILLM("stub", base_url=base_url, max_concurrency=c, max_retries=2, timeout=60)
        with tempfile.TemporaryDirectory(prefix="kg-pipelined-") as home:
            async with await KG.open(home=home, llm=llm) as kg:
                dates = sorted({when(e, i) for i, e in enumerate(turns)})[:: max(1, n // 40)]
                stub_stats(base_url, reset=True)
                if not args.skip_sequential:
                    t0 = time.perf_counter()
                    for i, e in enumerate(turns):
                        await kg.add_episode(episode("sequential", e, i))
                        if args.progress and i % 50 == 0:
                            print(
                                f"sequential {i}/{n} {time.perf_counter() - t0:.0f} s",
                                file=sys.stderr,
                                flush=True,
                            )
                    wall = time.perf_counter() - t0
                    calls = sum(stub_stats(base_url).values())
                    table.append(("kg sequential (add_episode, waiting)", wall, calls, ""))
                walls: list[float] = []
                for r in range(args.repeats):
                    group = "background" if r == 0 else f"background{r}"
                    stub_stats(base_url, reset=True)
                    t0 = time.perf_counter()
                    for i, e in enumerate(turns):
                        await kg.add_episode(episode(group, e, i), wait=False)
                    enqueued = time.perf_counter() - t0
                    stats = await Worker(kg, groups=[group], concurrency=c).drain()
                    walls.append(time.perf_counter() - t0)
                    calls = sum(stub_stats(base_url).values())
                    print(
                        f"background run {r + 1}: {walls[-1]:.1f} s, {calls} calls, "
                        f"enqueue {enqueued:.1f} s, load {load()}",
                        file=sys.stderr,
                        flush=True,
                    )
                    if not args.skip_sequential:
                        same = await as_of(kg, "sequential", dates) == await as_of(kg, group, dates)
                        print(
                            f"as-of answers and versions, sequential vs {group}: "
                            f"{'identical' if same else 'DIFFERENT'} ({len(dates) + 1} valid "
                            "times)"
                        )
                note = (
                    f"enqueue {enqueued:.1f} s ({1000 * enqueued / n:.1f} ms an episode); "
                    f"worker {stats.completed} written, {stats.failed} failed"
                )
                if len(walls) > 1:
                    note += (
                        f"; median of {len(walls)} runs, range {min(walls):.1f}-{max(walls):.1f} s"
                    )
                table.append(
                    ("kg background (enqueue + Worker)", statistics.median(walls), calls, note)
                )
                raw = []
                for _ in range(args.repeats):
                    raw.append(await client_alone(llm, turns, c))
                note = f"{c * statistics.median(raw) / n:.3f} s a call at {c} in flight"
                if len(raw) > 1:
                    note += f"; median of {len(raw)}, range {min(raw):.1f}-{max(raw):.1f} s"
                table.append(
                    ("LLM client alone (same client, no kg)", statistics.median(raw), n, note)
                )
                assert isinstance(kg.store, FalkorDBStore)
                await run_graphiti(kg.store, base_url, turns, args, table)
    finally:
        proc.terminate()
        proc.wait()
    print(
        f"\n# {n} turns of {conv}; stub latency {lat:.2f} s; concurrency {c}: limit "
        f"{limit:.1f} episodes/s at one call an episode ({n / limit:.0f} s); load average "
        f"at the end {load()}"
    )
    seq = next((w for name, w, _, _ in table if name.startswith("kg sequential")), None)
    print(
        "\n| path | wall s | episodes/s | LLM calls | calls/episode | vs sequential | "
        "of the limit | note |\n|---|---|---|---|---|---|---|---|"
    )
    for name, wall, calls, note in table:
        eps = n / wall
        speed = f"{seq / wall:.1f}x" if seq else "-"
        print(
            f"| {name} | {wall:.1f} | {eps:.2f} | {calls} | {calls / n:.2f} | {speed} | "
            f"{100 * eps / limit:.0f}% | {note} |"
        )
    rates = {name.split(" (")[0]: calls / wall for name, wall, calls, _ in table}
    if "LLM client alone" in rates and "kg background" in rates:
        print(
            f"\nkg background made its LLM calls at "
            f"{100 * rates['kg background'] / rates['LLM client alone']:.0f}% of the rate the "
            "client alone reached (calls/s)"
        )


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


async def client_alone(llm: OpenAILLM, turns: list[dict[str, Any]], c: int) -> float:
    """Wall time of one extraction call per turn through `llm`, `c` in flight, nothing else."""
    slots = asyncio.Semaphore(c)
    eps = [episode("alone", e, i) for i, e in enumerate(turns)]

    async def one(ep: Episode) -> None:
        async with slots:
            await extract(llm, ep, DEFAULT_ONTOLOGY, [])

    t0 = time.perf_counter()
    await asyncio.gather(*(one(ep) for ep in eps))
    return time.perf_counter() - t0


async def run_graphiti(
    store: FalkorDBStore,
    base_url: str,
    turns: list[dict[str, Any]],
    args: argparse.Namespace,
    table: list[tuple[str, float, int, str]],
) -> None:
    from graphiti_core.nodes import EpisodeType
    from graphiti_core.utils.bulk_utils import RawEpisode

    n, c = len(turns), args.concurrency
    os.environ["SEMAPHORE_LIMIT"] = str(c)
    if not args.skip_graphiti_bulk:
        counts = Counts()
        g = graphiti(
            store.client,
            "graphitibulk",
            base_url=base_url,
            model="stub",
            embedder=HashEmbedder(),
            counts=counts,
            max_coroutines=c,
        )
        await g.build_indices_and_constraints()
        raw = [
            RawEpisode(
                name=e["dia_id"],
                content=f"{e['speaker']}: {e['text']}",
                source_description="locomo",
                source=EpisodeType.message,
                reference_time=when(e, i),
            )
            for i, e in enumerate(turns)
        ]
        t0 = time.perf_counter()
        error = ""
        try:
            await g.add_episode_bulk(raw, group_id="graphitibulk")
        except Exception as exc:  # reported, not hidden
            error = f"raised {type(exc).__name__}: {str(exc)[:80]}"
        table.append(("graphiti add_episode_bulk", time.perf_counter() - t0, counts.calls, error))
    m = min(n, n if args.graphiti_loop_turns is None else args.graphiti_loop_turns)
    if m:
        counts = Counts()
        g = graphiti(
            store.client,
            "graphitiloop",
            base_url=base_url,
            model="stub",
            embedder=HashEmbedder(),
            counts=counts,
            max_coroutines=c,
        )
        await g.build_indices_and_constraints()
        raised = 0
        per: list[float] = []
        t0 = time.perf_counter()
        for i, e in enumerate(turns[:m]):
            t1 = time.perf_counter()
            try:
                await g.add_episode(
                    name=e["dia_id"],
                    episode_body=f"{e['speaker']}: {e['text']}",
                    source_description="locomo",
                    reference_time=when(e, i),
                    source=EpisodeType.message,
                    group_id="graphitiloop",
                )
            except Exception:
                raised += 1
            per.append(time.perf_counter() - t1)
            if args.progress and i % 25 == 0:
                print(f"graphiti loop {i}/{m}", file=sys.stderr, flush=True)
        wall = time.perf_counter() - t0
        note = f"{raised} raised; {statistics.mean(per):.2f} s an episode"
        if m < n:
            note += f"; measured on {m} turns, wall and calls extrapolated to {n}"
            wall, calls = wall * n / m, round(counts.calls * n / m)
        else:
            calls = counts.calls
        table.append(("graphiti add_episode loop", wall, calls, note))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", default=str(Path("../shared/data")))
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--graphiti-loop-turns", type=int, default=None)
    parser.add_argument("--skip-sequential", action="store_true")
    parser.add_argument("--skip-graphiti-bulk", action="store_true")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--stub-port", type=int, default=None)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
