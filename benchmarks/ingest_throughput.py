"""Structured-episode ingest throughput and kg.facts latency, embedded store or `--uri`.

    python benchmarks/ingest_throughput.py [--sizes 10000 100000] [--facts-per-episode 10]
        [--backend falkordb|neo4j|both]

Synthetic people with a home (LIVES_IN, single-valued: about one fact in five moves someone
and closes their previous home), an employer (WORKS_AT, single-valued) and friends (KNOWS,
multi-valued). The store is filled up to each size in turn, and at each size the script prints
ingest throughput of the last batch and the latency of three query shapes. The baseline is
the round trip of a bare PING (Neo4j: `RETURN 1`) to the same server, measured in the same
run: it is the floor under every query on this machine.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_store import add_store_options, bench_kg, describe, ping, run_per_backend

from kg import KG

START = datetime(2015, 1, 1, tzinfo=UTC)


def make_episodes(n_facts: int, per_episode: int, rng: random.Random) -> list[dict[str, Any]]:
    people = max(10, n_facts // 10)
    cities = [f"City {i}" for i in range(200)]
    companies = [f"Company {i}" for i in range(500)]
    episodes = []
    for e in range(n_facts // per_episode):
        ref = START + timedelta(minutes=e)
        facts = []
        for _ in range(per_episode):
            person = f"Person {rng.randrange(people)}"
            roll = rng.random()
            if roll < 0.4:
                facts.append(
                    {"subject": person, "predicate": "LIVES_IN", "object": rng.choice(cities)}
                )
            elif roll < 0.6:
                facts.append(
                    {"subject": person, "predicate": "WORKS_AT", "object": rng.choice(companies)}
                )
            else:
                facts.append(
                    {
                        "subject": person,
                        "predicate": "KNOWS",
                        "object": f"Person {rng.randrange(people)}",
                    }
                )
        episodes.append({"source": "facts", "reference_time": ref, "facts": facts})
    return episodes


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


async def timed(n: int, call: Callable[[int], Awaitable[Any]]) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        await call(i)
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def query_latencies(
    kg: KG, people: int, n: int, rng: random.Random
) -> dict[str, list[float]]:
    """Milliseconds per call for three query shapes, and the bare PING floor."""

    def who() -> str:
        return f"Person {rng.randrange(people)}"

    past = datetime(2016, 1, 1, tzinfo=UTC)
    return {
        "ping": await timed(n, lambda i: ping(kg)),
        "subject": await timed(n, lambda i: kg.facts(subject=who())),
        "subject+predicate": await timed(
            n, lambda i: kg.facts(subject=who(), predicate="LIVES_IN")
        ),
        "as-of 2016": await timed(n, lambda i: kg.facts(subject=who(), valid_at=past)),
    }


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    sizes = sorted(args.sizes)
    episodes = make_episodes(sizes[-1], args.facts_per_episode, rng)

    async with bench_kg(args) as kg:
        print(
            f"# ingest and query benchmark: {args.facts_per_episode} facts per episode, "
            f"on {await describe(kg, args)}"
        )
        print(
            "| facts | ingest facts/s | ms/episode | closed | facts p50/p95 ms "
            "| subject+predicate p50/p95 | as-of 2016 p50/p95 | PING p50 ms |"
        )
        print("|---|---|---|---|---|---|---|---|")
        done = 0
        closed = 0
        for size in sizes:
            batch = episodes[done // args.facts_per_episode : size // args.facts_per_episode]
            t0 = time.perf_counter()
            for ep in batch:
                r = await kg.add_episode(**ep)
                closed += r.summary.facts_closed
            elapsed = time.perf_counter() - t0
            n_facts = len(batch) * args.facts_per_episode
            done = size
            lat = await query_latencies(kg, max(10, size // 10), args.queries, rng)
            print(
                f"| {size:,} | {n_facts / elapsed:,.0f} | {1000 * elapsed / len(batch):.2f} "
                f"| {closed:,} | "
                + " | ".join(
                    f"{pct(lat[k], 50):.2f} / {pct(lat[k], 95):.2f}"
                    for k in ("subject", "subject+predicate", "as-of 2016")
                )
                + f" | {pct(lat['ping'], 50):.2f} |",
                flush=True,
            )
        stats = await kg.stats()
        print(
            f"\nfinal: {stats.episodes:,} episodes, {stats.entities:,} entities, "
            f"{stats.edge_versions:,} edge versions, {stats.current_facts:,} current facts"
        )


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--facts-per-episode", type=int, default=10)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    add_store_options(parser)
    return parser


if __name__ == "__main__":
    run_per_backend(parser(), main)
