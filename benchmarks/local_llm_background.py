"""A real (weak) local model on the background path, and graphiti-core on the same server.

    python benchmarks/local_llm_background.py [DATA_DIR] [--turns 200] [--threads 1] [--budget 1200]

Needs the `llm-local` extra (or KG_LOCAL_LLM_PYTHON naming a venv that has it; see
tests/local_llm.py) and graphiti-core (`bench` extra). Starts SmolLM2-135M-Instruct behind
llama-cpp-python's OpenAI server on loopback, then, in one run, on one embedded FalkorDB:

1. kg: the first `--turns` dialogue turns of LoCoMo's first conversation enqueued with
   `add_episode(wait=False)` (one message episode each; reference time = session time plus
   the turn's index in seconds, so turns keep their order), then a `kg.queue.Worker` drains
   the queue. Reported: episodes ingested / failed-and-recorded / crashed (an exception out
   of the worker, or an episode left neither ingested nor failed) and half-written ones
   (versions citing an episode that is not ingested), facts kept by vetting and dropped by
   each rule, LLM calls and tokens per episode, wall time.
2. graphiti-core 0.31.2: the same turns through `Graphiti.add_episode`, one after the other,
   in a graph of its own on the same FalkorDB, with its documented `json_object` mode
   (llama-cpp-python's server refuses `json_schema`). Reported: episodes that raise, LLM
   calls, tokens, wall time.

Both use all-MiniLM-L6-v2 embeddings and the same reply cap (`--max-tokens`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.graphiti_llm import Counts, graphiti
from kg import KG, local_minilm
from kg.facade import EpisodeResult
from kg.graphiti_embedder import GraphitiEmbedder
from kg.ingest.llm import OpenAILLM
from kg.queue import Worker
from kg.schemas.episode import Episode
from kg.schemas.graph import EpisodeStatus
from kg.store.falkordb import FalkorDBStore
from tests.local_llm import MODEL, LocalLLMServer


def spread(values: list[float], unit: str = "") -> str:
    if not values:
        return "n/a"
    q = statistics.quantiles(values, n=20, method="inclusive") if len(values) > 1 else values
    return (f"mean {statistics.mean(values):.1f}{unit}, p50 {statistics.median(values):.1f}"
            f"{unit}, p95 {q[-1]:.1f}{unit}, max {max(values):.1f}{unit}")  # fmt: skip


def turns_of(data_dir: str, n: int) -> tuple[str, list[dict[str, Any]]]:
    data = json.loads((Path(data_dir) / "locomo" / "locomo_dev.json").read_text())
    conv = sorted({e["conv"] for e in data["episodes"]})[0]
    return conv, [e for e in data["episodes"] if e["conv"] == conv][:n]


def when(e: dict[str, Any], i: int) -> datetime:
    return datetime.fromisoformat(e["valid_at"]).replace(tzinfo=UTC) + timedelta(seconds=i)


async def run_kg(kg: KG, conv: str, turns: list[dict[str, Any]], args: argparse.Namespace) -> None:
    results: list[EpisodeResult] = []
    enqueued: dict[str, float] = {}  # episode uuid -> when add_episode(wait=False) was called
    to_text: list[float] = []  # add_episode(wait=False) call until a search finds the text
    to_facts: list[float] = []  # the call until its facts are written (ingested)
    missed = 0
    for i, e in enumerate(turns):
        t1 = time.perf_counter()
        r = await kg.add_episode(Episode(
            source="message", group_id=conv, content=f"{e['speaker']}: {e['text']}",
            reference_time=when(e, i), source_description=f"locomo {e['dia_id']}",
        ), wait=False)  # fmt: skip
        found = await kg.search(e["text"], group_id=conv, recipe="episodes_bm25", limit=50)
        to_text.append(time.perf_counter() - t1)
        missed += r.episode_uuid not in {h.episode.uuid for h in found.episodes}
        enqueued[r.episode_uuid] = t1

    def done(r: EpisodeResult) -> None:
        results.append(r)
        to_facts.append(time.perf_counter() - enqueued[r.episode_uuid])
        if args.progress:
            print(f"kg {len(results)}/{len(turns)} at {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip

    worker = Worker(kg, groups=[conv], concurrency=1, poll_seconds=0.5,
                    lease_seconds=args.timeout * 3, on_result=done)  # fmt: skip
    crashes: list[str] = []
    t0 = time.perf_counter()
    draining = asyncio.create_task(worker.drain())
    try:  # the budget: stop claiming, finish the episode being written, hand the rest back
        stats = await asyncio.wait_for(asyncio.shield(draining), args.budget)
    except TimeoutError:
        await worker.stop()
        stats = await draining
    except Exception as exc:  # a crash: what this run looks for
        crashes.append(f"{type(exc).__name__}: {exc}")
        stats = worker.stats
    wall = time.perf_counter() - t0
    status = Counter(n.status.value for n in await all_episodes(kg, conv))
    ingested = {n.uuid for n in await all_episodes(kg, conv) if n.status is EpisodeStatus.ingested}
    versions = await kg.history(group_id=conv, limit=100_000)
    orphans = [v for v in versions if not set(v.edge.episodes) <= ingested]
    unreached = status["queued"]  # handed back when the budget ran out
    stranded = len(turns) - status["ingested"] - status["failed"] - unreached
    dropped: Counter[str] = Counter()
    for r in results:
        dropped.update(r.summary.facts_dropped)
    kept = sum(r.summary.facts_added + r.summary.facts_reinforced + r.summary.facts_merged
               for r in results)  # fmt: skip
    extracted = [n.facts_extracted or 0 for n in await all_episodes(kg, conv)
                 if n.status is EpisodeStatus.ingested]  # fmt: skip
    finished = [n for n in await all_episodes(kg, conv)  # not those the budget left queued
                if n.status in (EpisodeStatus.ingested, EpisodeStatus.failed)]  # fmt: skip
    calls = [float(n.llm_calls) for n in finished]
    tokens = [float(n.llm_tokens) for n in finished]
    reasons: Counter[str] = Counter(r for n in await all_episodes(kg, conv)
                                    for r in n.failure_reasons)  # fmt: skip
    n = len(turns)
    print(f"\n## kg, background (enqueue + Worker.drain), {n} turns of {conv}")
    print(f"reply format accepted: {kg.llm.json_mode if isinstance(kg.llm, OpenAILLM) else '?'}")
    print("| outcome | episodes |\n|---|---|")
    print(f"| ingested | {status['ingested']} |\n| failed-and-recorded | {status['failed']} |")
    print(f"| crashed (exception out of the worker, or left unfinished) | "
          f"{len(crashes) + stranded} |")  # fmt: skip
    print(f"| still queued when the {args.budget:.0f} s budget ran out | {unreached} |")
    print(f"half-written: {len(orphans)} versions cite a non-ingested episode")
    print(
        f"enqueue -> text searchable (add_episode(wait=False), then an episodes_bm25 "
        f"search): {spread(to_text, ' s')}; not found right after: {missed} of {n}"
    )
    print(
        f"enqueue -> facts written (burst of {n} enqueued first, then drained): "
        f"{spread(to_facts, ' s')}"
    )
    for c in crashes:
        print(f"  CRASH {c}")
    print(f"worker: {stats}")
    print(f"failed attempts by reason: {dict(reasons)}")
    proposed = sum(extracted) + sum(dropped.values())
    print(f"facts proposed (ingested episodes): {proposed}; kept by vetting "
          f"{sum(extracted)}; written as added/reinforced/merged {kept}")  # fmt: skip
    print("| dropped by rule | facts |\n|---|---|")
    for rule, count in dropped.most_common():
        print(f"| {rule} | {count} |")
    print(f"LLM calls per finished episode: {spread(calls)}")
    print(f"LLM tokens per finished episode: {spread(tokens)}")
    print(f"wall time: {wall:.0f} s ({len(finished) / wall * 60:.2f} finished episodes/min)")


async def all_episodes(kg: KG, group: str) -> list[Any]:
    from kg.schemas.graph import EpisodicNode

    rows = await kg.store.raw_query(group, "MATCH (e:Episodic) RETURN properties(e) AS ep")
    return [EpisodicNode.model_validate(kg.store._decode(r["ep"])) for r in rows]  # type: ignore[attr-defined]


async def run_graphiti(
    store: FalkorDBStore,
    base_url: str,
    turns: list[dict[str, Any]],
    args: argparse.Namespace,
    embedder: Any,
) -> None:
    from graphiti_core.nodes import EpisodeType

    counts = Counts()
    g = graphiti(store.client, "graphitirun", base_url=base_url, model=args.model,
                 embedder=GraphitiEmbedder(embedder), counts=counts, timeout=args.timeout,
                 max_tokens=args.max_tokens, json_object=True)  # fmt: skip
    await g.build_indices_and_constraints()
    raised: Counter[str] = Counter()
    t0 = time.perf_counter()
    for i, e in enumerate(turns):
        try:
            await g.add_episode(name=e["dia_id"], episode_body=f"{e['speaker']}: {e['text']}",
                                source_description="locomo", reference_time=when(e, i),
                                source=EpisodeType.message, group_id="graphitirun")  # fmt: skip
        except Exception as exc:
            raised[type(exc).__name__] += 1
        if args.progress:
            print(f"graphiti {i + 1}/{len(turns)} calls {counts.calls}", file=sys.stderr)
    wall = time.perf_counter() - t0
    n = len(turns)
    print(f"\n## graphiti-core add_episode, one after the other, {n} turns")
    print(f"episodes that raised: {sum(raised.values())} {dict(raised)}")
    print(f"LLM calls: {counts.calls} ({counts.calls / n:.2f} per episode; "
          f"{counts.errors} answered with an error status)")  # fmt: skip
    print(
        f"tokens: prompt {counts.prompt_tokens}, completion {counts.completion_tokens} "
        f"({(counts.prompt_tokens + counts.completion_tokens) / n:.0f} per episode)"
    )
    print(f"wall time: {wall:.0f} s ({n / wall * 60:.2f} episodes/min)")


async def main_async(args: argparse.Namespace, base_url: str) -> None:
    conv, turns = turns_of(args.data, args.turns)
    embedder = local_minilm()
    llm = OpenAILLM(args.model, base_url=base_url, max_concurrency=1, max_retries=2,
                    timeout=args.timeout, max_tokens=args.max_tokens)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="kg-local-bg-") as home:
        async with await KG.open(home=home, llm=llm, embedder=embedder) as kg:
            print(f"# SmolLM2-135M at {base_url}, llama.cpp threads {args.threads}, "
                  f"max_tokens {args.max_tokens}")  # fmt: skip
            if not args.skip_kg:
                await run_kg(kg, conv, turns, args)
            if not args.skip_graphiti:
                assert isinstance(kg.store, FalkorDBStore)
                await run_graphiti(kg.store, base_url, turns, args, embedder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", default=str(Path("../shared/data")))
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--base-url", default=None, help="use a running server")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--skip-kg", action="store_true")
    parser.add_argument("--skip-graphiti", action="store_true")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument(
        "--budget",
        type=float,
        default=1200.0,
        help="seconds the worker drains before it is stopped",
    )
    args = parser.parse_args()
    if args.base_url:
        asyncio.run(main_async(args, args.base_url))
        return
    with LocalLLMServer(threads=args.threads) as server:
        asyncio.run(main_async(args, server.base_url))


if __name__ == "__main__":
    main()
