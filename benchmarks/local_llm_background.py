"""A real (weak) local model on the background path, and graphiti-core on the same server.

    python benchmarks/local_llm_background.py [DATA_DIR] [--turns 200] [--budget 2400] [--together]
        [--first-turn 0]

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

Both use all-MiniLM-L6-v2 embeddings and the same reply cap (`--max-tokens`), and both
stop at `--budget` seconds (graphiti: no episode is started after it, the one running is
cancelled at it). `--together` runs the two at once, each on its own server with the same
settings (one llama.cpp thread each on the 2 cores), so both see the same machine load;
otherwise kg runs first, then graphiti. Every chat completion is timed on the client (prompt
and generated tokens, seconds, replies cut at the cap), and with `--log-dir` each server
logs llama.cpp's timings per request (prompt tokens actually evaluated, not reused).

`--first-turn N` takes the turns [N, N + turns) of the same order instead of the first ones,
with the reference times they have in a run from turn 0: a run cut by its budget can be
finished later. The later run starts from an empty graph, so its turns do not see the graph
the earlier turns would have written; say so next to its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.graphiti_llm import Counts, counting_client, graphiti
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
    return (
        f"mean {statistics.mean(values):.1f}{unit}, p50 {statistics.median(values):.1f}"
        f"{unit}, p95 {q[-1]:.1f}{unit}, max {max(values):.1f}{unit}"
    )


def per_call(counts: Counts, cap: int, server_log: str = "") -> None:
    """Per chat completion: tokens in and out, seconds, and replies cut at the cap."""
    done = counts.answered
    print(
        f"per call ({len(done)} answered, {counts.errors} error statuses): prompt tokens "
        f"{spread([float(c.prompt_tokens) for c in done])}; generated tokens "
        f"{spread([float(c.completion_tokens) for c in done])}; seconds "
        f"{spread([c.seconds for c in done], ' s')}; cut at the {cap}-token cap: "
        f"{sum(c.finish_reason == 'length' for c in done)}"
    )
    evaluated = [int(n) for n in re.findall(r"prompt eval time =.*?/\s*(\d+) tokens", server_log)]
    if evaluated:
        print(
            f"prompt tokens evaluated by llama.cpp (the rest reused from its cache): "
            f"{sum(evaluated)} of {counts.prompt_tokens}"
        )


def turns_of(data_dir: str, n: int, first: int = 0) -> tuple[str, list[dict[str, Any]]]:
    """The turns [first, first + n) of LoCoMo's first conversation, in the file's order."""
    data = json.loads((Path(data_dir) / "locomo" / "locomo_dev.json").read_text())
    conv = sorted({e["conv"] for e in data["episodes"]})[0]
    return conv, [e for e in data["episodes"] if e["conv"] == conv][first : first + n]


def when(e: dict[str, Any], i: int) -> datetime:
    """`i` is the turn's index in the whole conversation, so a tail run keeps the same times."""
    return datetime.fromisoformat(e["valid_at"]).replace(tzinfo=UTC) + timedelta(seconds=i)


async def run_kg(
    kg: KG,
    conv: str,
    turns: list[dict[str, Any]],
    args: argparse.Namespace,
    counts: Counts,
    server: LocalLLMServer | None,
) -> None:
    results: list[EpisodeResult] = []
    enqueued: dict[str, float] = {}  # episode uuid -> when add_episode(wait=False) was called
    to_text: list[float] = []  # add_episode(wait=False) call until a search finds the text
    to_facts: list[float] = []  # the call until its facts are written (ingested)
    missed = 0
    for i, e in enumerate(turns):
        t1 = time.perf_counter()
        r = await kg.add_episode(
            Episode(
                source="message",
                group_id=conv,
                content=f"{e['speaker']}: {e['text']}",
                reference_time=when(e, args.first_turn + i),
                source_description=f"locomo {e['dia_id']}",
            ),
            wait=False,
        )
        found = await kg.search(e["text"], group_id=conv, recipe="episodes_bm25", limit=50)
        to_text.append(time.perf_counter() - t1)
        missed += r.episode_uuid not in {h.episode.uuid for h in found.episodes}
        enqueued[r.episode_uuid] = t1

    def done(r: EpisodeResult) -> None:
        results.append(r)
        to_facts.append(time.perf_counter() - enqueued[r.episode_uuid])
        if args.progress:
            print(
                f"kg {len(results)}/{len(turns)} at {time.perf_counter() - t0:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    worker = Worker(
        kg,
        groups=[conv],
        concurrency=1,
        poll_seconds=0.5,
        lease_seconds=args.timeout * 3,
        on_result=done,
    )
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
    kept = sum(
        r.summary.facts_added + r.summary.facts_reinforced + r.summary.facts_merged for r in results
    )
    extracted = [
        n.facts_extracted or 0
        for n in await all_episodes(kg, conv)
        if n.status is EpisodeStatus.ingested
    ]
    finished = [
        n
        for n in await all_episodes(kg, conv)  # not those the budget left queued
        if n.status in (EpisodeStatus.ingested, EpisodeStatus.failed)
    ]
    calls = [float(n.llm_calls) for n in finished]
    tokens = [float(n.llm_tokens) for n in finished]
    reasons: Counter[str] = Counter(
        r for n in await all_episodes(kg, conv) for r in n.failure_reasons
    )
    n = len(turns)
    print(f"\n## kg, background (enqueue + Worker.drain), {n} turns of {conv} ({span(args, n)})")
    print(f"reply format accepted: {kg.llm.json_mode if isinstance(kg.llm, OpenAILLM) else '?'}")
    print("| outcome | episodes |\n|---|---|")
    print(f"| ingested | {status['ingested']} |\n| failed-and-recorded | {status['failed']} |")
    print(
        f"| crashed (exception out of the worker, or left unfinished) | {len(crashes) + stranded} |"
    )
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
    print(
        f"facts proposed (ingested episodes): {proposed}; kept by vetting "
        f"{sum(extracted)}; written as added/reinforced/merged {kept}"
    )
    print("| dropped by rule | facts |\n|---|---|")
    for rule, count in dropped.most_common():
        print(f"| {rule} | {count} |")
    print(f"LLM calls per finished episode: {spread(calls)}")
    print(f"LLM tokens per finished episode: {spread(tokens)}")
    per_call(counts, args.max_tokens, server.output() if server else "")
    print(f"wall time: {wall:.0f} s ({len(finished) / wall * 60:.2f} finished episodes/min)")


def span(args: argparse.Namespace, n: int) -> str:
    """Which turns ran; a tail never saw the graph its earlier turns would have written."""
    tail = ", on an empty graph: turns before these not ingested" if args.first_turn else ""
    return f"turns {args.first_turn} to {args.first_turn + n - 1}{tail}"


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
    server: LocalLLMServer | None,
) -> None:
    from graphiti_core.nodes import EpisodeType

    counts = Counts()
    g = graphiti(
        store.client,
        "graphitirun",
        base_url=base_url,
        model=args.model,
        embedder=GraphitiEmbedder(embedder),
        counts=counts,
        timeout=args.timeout,
        max_tokens=args.max_tokens,
        json_object=True,
    )
    await g.build_indices_and_constraints()
    log_from = len(server.output()) if server else 0  # one server for both: only graphiti's
    raised: Counter[str] = Counter()
    finished: list[tuple[float, int, int]] = []  # seconds, calls, tokens of each episode done
    cut = 0  # the episode running when the budget ran out, cancelled
    t0 = time.perf_counter()
    for i, e in enumerate(turns):
        left = args.budget - (time.perf_counter() - t0)
        if left <= 0:
            break
        t1, calls0 = time.perf_counter(), counts.calls
        tokens0 = counts.prompt_tokens + counts.completion_tokens
        try:
            await asyncio.wait_for(
                g.add_episode(
                    name=e["dia_id"],
                    episode_body=f"{e['speaker']}: {e['text']}",
                    source_description="locomo",
                    reference_time=when(e, args.first_turn + i),
                    source=EpisodeType.message,
                    group_id="graphitirun",
                ),
                left,
            )
        except TimeoutError:
            cut = 1
            break
        except Exception as exc:
            raised[type(exc).__name__] += 1
        finished.append(
            (
                time.perf_counter() - t1,
                counts.calls - calls0,
                counts.prompt_tokens + counts.completion_tokens - tokens0,
            )
        )
        if args.progress:
            print(
                f"graphiti {i + 1}/{len(turns)} (turn {args.first_turn + i}) calls "
                f"{counts.calls} at {time.perf_counter() - t0:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    wall = time.perf_counter() - t0
    n, done = len(turns), len(finished)
    print(f"\n## graphiti-core add_episode, one after the other, {n} turns ({span(args, n)})")
    print(
        f"episodes finished: {done} of {n} ({sum(raised.values())} of them raised "
        f"{dict(raised)}); cancelled at the {args.budget:.0f} s budget: {cut}; "
        f"not started: {n - done - cut}"
    )
    print(
        f"LLM calls: {counts.calls} ({counts.errors} answered with an error status); "
        f"per finished episode: {spread([float(c) for _, c, _ in finished])}"
    )
    print(
        f"tokens: prompt {counts.prompt_tokens}, completion {counts.completion_tokens}; "
        f"per finished episode: {spread([float(t) for _, _, t in finished])}"
    )
    print(f"seconds per finished episode: {spread([s for s, _, _ in finished], ' s')}")
    per_call(counts, args.max_tokens, server.output()[log_from:] if server else "")
    print(f"wall time: {wall:.0f} s ({done / wall * 60:.2f} finished episodes/min)")


async def main_async(
    args: argparse.Namespace, servers: list[LocalLLMServer | None], urls: list[str]
) -> None:
    conv, turns = turns_of(args.data, args.turns, args.first_turn)
    embedder = local_minilm()
    counts = Counts()
    llm = OpenAILLM(
        args.model,
        base_url=urls[0],
        max_concurrency=1,
        max_retries=2,
        timeout=args.timeout,
        max_tokens=args.max_tokens,
        http_client=counting_client(counts, args.timeout),
    )
    with tempfile.TemporaryDirectory(prefix="kg-local-bg-") as home:
        async with await KG.open(home=home, llm=llm, embedder=embedder) as kg:
            print(
                f"# SmolLM2-135M at {', '.join(urls)}, llama.cpp threads {args.threads}, "
                f"n_ctx {args.n_ctx}, RAM prompt cache {args.prompt_cache}, "
                f"nice {args.nice}, max_tokens {args.max_tokens}, budget {args.budget:.0f} s, "
                f"{'together' if args.together else 'one after the other'}"
            )
            assert isinstance(kg.store, FalkorDBStore)
            jobs = []
            if not args.skip_kg:
                jobs.append(run_kg(kg, conv, turns, args, counts, servers[0]))
            if not args.skip_graphiti:
                jobs.append(run_graphiti(kg.store, urls[-1], turns, args, embedder, servers[-1]))
            if args.together:
                await asyncio.gather(*jobs)
            else:
                for job in jobs:
                    await job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", default=str(Path("../shared/data")))
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument(
        "--first-turn",
        type=int,
        default=0,
        help="start at this turn of the same order (finish a cut run)",
    )
    parser.add_argument("--base-url", default=None, help="use a running server")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads")
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument(
        "--port", type=int, default=None, help="the first server's port (graphiti's: the next)"
    )
    parser.add_argument("--nice", type=int, default=5, help="the servers' niceness")
    parser.add_argument(
        "--prompt-cache",
        action="store_true",
        help="llama-cpp-python's RAM prompt cache (its memory grows)",
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help="keep each server's log (llama.cpp timings a request)",
    )
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--max-tokens", type=int, default=320)
    parser.add_argument("--skip-kg", action="store_true")
    parser.add_argument("--skip-graphiti", action="store_true")
    parser.add_argument(
        "--together", action="store_true", help="kg and graphiti at once, each on its own server"
    )
    parser.add_argument("--progress", action="store_true")
    parser.add_argument(
        "--budget",
        type=float,
        default=2400.0,
        help="seconds kg's worker drains (and graphiti ingests) before it is stopped",
    )
    args = parser.parse_args()
    if args.first_turn < 0:
        parser.error("--first-turn must be >= 0")
    if args.base_url:
        asyncio.run(main_async(args, [None], [args.base_url]))
        return
    two = args.together and not (args.skip_kg or args.skip_graphiti)
    with contextlib.ExitStack() as stack:
        servers: list[LocalLLMServer | None] = []
        sides = ("kg", "graphiti") if two else ("graphiti",) if args.skip_kg else ("kg",)
        for i, name in enumerate(sides):  # the log named after the side its server serves
            log = args.log_dir / f"llama-{name}.log" if args.log_dir else None
            if log:
                log.parent.mkdir(parents=True, exist_ok=True)
            servers.append(
                stack.enter_context(
                    LocalLLMServer(
                        port=args.port + i if args.port else None,
                        threads=args.threads,
                        n_ctx=args.n_ctx,
                        nice=args.nice,
                        log_path=log,
                        cache=args.prompt_cache,
                        verbose=True,
                    )
                )
            )
        urls = [s.base_url for s in servers if s is not None]
        asyncio.run(main_async(args, servers, urls))


if __name__ == "__main__":
    main()
