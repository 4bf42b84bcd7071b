"""kg against its own store's floors, on each backend in one run (issue 28's three checks).

    python benchmarks/floors.py [--backend falkordb|neo4j|both] [--episodes 1000]
        [--repeats 3] [--queries 300] [--small 10000] [--large 100000] [--searches 60]

Each backend gets a fresh store (the embedded FalkorDB; a throwaway Neo4j 5.26 dev server,
see bench_store.py), and on it, in one process:

1. Structured ingest (no embedder, as in bulk_ingest.py): `benchmarks/bulk_ingest.py`'s
   synthetic episodes through `KG.add_episodes`, then the graph kg wrote written again by
   bare batched UNWIND CREATEs (the raw batched write, 200 episodes' worth per
   transaction): kg's rate as a share of the floor's, per repeat. Target: at least a third.
   A `--warm-up` batch goes first, untimed: a fresh server compiles kg's queries once.
2. `kg.facts(subject=)` on that group against a bare indexed Cypher read of the same facts (the
   subject by its (group, name key) index, its edges' properties and objects), in turns, on
   the same random subjects: p50 / p95 of each and kg's p50 as a multiple of the bare read's.
   Target: at most 3x.
3. The default search (`kg.search`, MiniLM query embedding included) on a `--small` group of
   `benchmarks/search_latency.py`'s facts, alone in the store, then again once a `--large`
   group is loaded beside it; with a bare vector index query (k = 10, the query embedded
   beforehand) on the same data as the floor. Target: p95 beside the large group at most 2x
   the p95 alone.

Figures are p50 / p95 within a run; run it more than once for the spread across runs. The load
average is printed with each figure: on a shared machine, absolute times follow it.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_store import add_store_options, bench_kg, describe, run_per_backend

from benchmarks.bulk_ingest import counts, floor, regroup, rows
from benchmarks.ingest_throughput import make_episodes
from benchmarks.search_latency import PEOPLE, QUERIES, Bulk, template
from kg import KG
from kg.ingest.embeddings import local_minilm
from kg.ingest.names import name_key
from kg.store.cypher.store import CypherStore
from kg.store.falkordb import FalkorDBStore


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def p50_95(values: list[float]) -> str:
    return f"{pct(values, 50):.2f} / {pct(values, 95):.2f}"


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


async def ingest(kg: KG, args: argparse.Namespace) -> list[str]:
    per = args.facts_per_episode
    episodes = make_episodes(args.episodes * per, per, random.Random(args.seed))
    n = len(episodes)
    writes = math.ceil(n / 200)
    assert isinstance(kg.store, CypherStore)
    shares, out = [], []
    if args.warm_up:  # a fresh server compiles the batch's query and planning read once
        t0 = time.perf_counter()
        warm = make_episodes(args.warm_up * per, per, random.Random(args.seed + 1))
        result = await kg.add_episodes([{**e, "group_id": "warm"} for e in warm])
        assert not result.failed, result.failed
        out.append(
            f"warm-up: {len(warm)} episodes in {time.perf_counter() - t0:.1f} s (not counted)"
        )
        print(out[-1], flush=True)
    for r in range(args.repeats):
        t0 = time.perf_counter()
        result = await kg.add_episodes([{**e, "group_id": f"kg{r}"} for e in episodes])
        took = time.perf_counter() - t0
        assert not result.failed, result.failed
        data = regroup(await rows(kg, f"kg{r}"), f"raw{r}")
        t0 = time.perf_counter()
        await floor(kg.store, f"raw{r}", data, writes)
        floor_took = time.perf_counter() - t0
        shares.append(floor_took / took)
        out.append(
            f"ingest repeat {r + 1}: kg {n * per / took:,.0f} facts/s, raw batched write "
            f"{n * per / floor_took:,.0f} facts/s, kg's share {shares[-1]:.0%} ({load()})"
        )
        print(out[-1], flush=True)
        assert await counts(kg, f"kg{r}") == await counts(kg, f"raw{r}")
    out.append(
        f"ingest: kg's share of the raw batched rate, median "
        f"{statistics.median(shares):.0%} (min {min(shares):.0%}, max {max(shares):.0%}; "
        f"target >= 33%)"
    )
    return out


async def lookups(kg: KG, args: argparse.Namespace) -> list[str]:
    people = max(10, args.episodes * args.facts_per_episode // 10)
    rng = random.Random(args.seed)
    bare_q = (
        "MATCH (s:Entity {name_key: $k})-[e:RELATES_TO]->(o:Entity) WHERE s.group_id = $g "
        "RETURN properties(e) AS e, o.name AS object"
    )
    kg_ms: list[float] = []
    bare_ms: list[float] = []
    for i in range(args.queries + 20):
        who = f"Person {rng.randrange(people)}"
        t0 = time.perf_counter()
        await kg.facts(group_id="kg0", subject=who)
        t1 = time.perf_counter()
        await kg.store.raw_query("kg0", bare_q, {"k": name_key(who), "g": "kg0"})  # type: ignore[attr-defined]
        t2 = time.perf_counter()
        if i >= 20:  # warm-up: plan caches, connections
            kg_ms.append((t1 - t0) * 1000)
            bare_ms.append((t2 - t1) * 1000)
    ratio = pct(kg_ms, 50) / pct(bare_ms, 50)
    return [
        f"kg.facts(subject=) p50 / p95 {p50_95(kg_ms)} ms; bare indexed read "
        f"{p50_95(bare_ms)} ms; kg's p50 {ratio:.2f}x the bare read's (target <= 3x; "
        f"{load()})"
    ]


def vector_floor(kg: KG) -> str:
    if isinstance(kg.store, FalkorDBStore):
        return (
            "CALL db.idx.vector.queryRelationships('RELATES_TO', 'fact_embedding', 10, "
            "vecf32($v)) YIELD relationship RETURN relationship.uuid AS u"
        )
    return (
        "CALL db.index.vector.queryRelationships('kg_fact_embedding', 10, $v) "
        "YIELD relationship RETURN relationship.uuid AS u"
    )


async def searches(kg: KG, group: str, vectors: list[list[float]], n: int) -> tuple[Any, ...]:
    """(search ms, cosine branch ms, bare vector query ms), each over `n` queries."""
    await kg.search("warm up", group_id=group)
    search_ms, cosine_ms, bare_ms = [], [], []
    for i in range(n):
        t0 = time.perf_counter()
        r = await kg.search(QUERIES[i % len(QUERIES)], group_id=group)
        search_ms.append((time.perf_counter() - t0) * 1000)
        cosine_ms += [b.latency_ms for b in r.branches if b.method == "cosine"]
        t0 = time.perf_counter()
        await kg.store.raw_query(group, vector_floor(kg), {"v": vectors[i % len(vectors)]})  # type: ignore[attr-defined]
        bare_ms.append((time.perf_counter() - t0) * 1000)
    return search_ms, cosine_ms, bare_ms


async def fill(kg: KG, group: str, size: int, vectors: dict[str, list[float]]) -> str:
    assert kg.embedder is not None
    bulk = Bulk(kg, group, kg.embedder.dim)
    await kg.store.ensure_schema(group)
    await bulk.write_bases(vectors)
    await bulk.q("CREATE (:Episodic {uuid: 'bench', group_id: $g})", {"g": group})
    await bulk.drop_fact_index()
    t0 = time.perf_counter()
    await bulk.fill(
        0, size, PEOPLE + [f"Person {i}" for i in range(5000)], vectors, random.Random(size)
    )
    loaded = time.perf_counter() - t0
    t0 = time.perf_counter()
    await bulk.build_fact_index()
    built = time.perf_counter() - t0
    return f"{group}: {size:,} facts loaded in {loaded:.0f} s, index in {built:.0f} s"


async def search_beside(kg: KG, args: argparse.Namespace) -> list[str]:
    assert kg.embedder is not None
    rng = random.Random(7)
    people = PEOPLE + [f"Person {i}" for i in range(5000)]
    texts = list(dict.fromkeys(template(rng, people)[3] for _ in range(args.distinct * 3)))
    texts = texts[: args.distinct]
    vectors = dict(zip(texts, await kg.embedder.embed(texts), strict=True))
    query_vectors = await kg.embedder.embed(QUERIES)
    out = [await fill(kg, "small", args.small, vectors)]
    print(out[-1], flush=True)
    alone = await searches(kg, "small", query_vectors, args.searches)
    out.append(
        f"search, {args.small:,}-fact group alone: p50 / p95 {p50_95(alone[0])} ms "
        f"(cosine branch {p50_95(alone[1])}; bare vector query {p50_95(alone[2])}; "
        f"{load()})"
    )
    print(out[-1], flush=True)
    out.append(await fill(kg, "large", args.large, vectors))
    print(out[-1], flush=True)
    beside = await searches(kg, "small", query_vectors, args.searches)
    out.append(
        f"search, {args.small:,}-fact group beside a {args.large:,}-fact group: p50 / "
        f"p95 {p50_95(beside[0])} ms (cosine branch {p50_95(beside[1])}; bare vector "
        f"query {p50_95(beside[2])}; {load()})"
    )
    print(out[-1], flush=True)
    out.append(
        f"search p95 beside / alone: {pct(beside[0], 95) / pct(alone[0], 95):.2f}x (target <= 2x)"
    )
    return out


async def main(args: argparse.Namespace) -> None:
    async with bench_kg(args, embedder=local_minilm()) as kg:
        header = f"## {await describe(kg, args)} ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)"
        print(header, flush=True)
        lines = [header]
        plain = KG(kg.store)  # no embedder: ingest and lookups measure the store, not MiniLM
        if "ingest" in args.parts:
            lines += await ingest(plain, args)
        if "facts" in args.parts:
            lines += await lookups(plain, args)
        if "search" in args.parts:
            lines += await search_beside(kg, args)
        print("\n" + "\n".join(lines), flush=True)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--facts-per-episode", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--warm-up",
        type=int,
        default=50,
        help="episodes ingested into a group of their own before the timed repeats (0: none)",
    )
    ap.add_argument("--queries", type=int, default=300, help="kg.facts lookups timed")
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--large", type=int, default=100_000)
    ap.add_argument("--searches", type=int, default=60, help="searches timed per measurement")
    ap.add_argument("--distinct", type=int, default=3000, help="distinct sentences embedded")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--parts",
        nargs="+",
        default=["ingest", "facts", "search"],
        choices=["ingest", "facts", "search"],
    )
    add_store_options(ap)
    return ap


if __name__ == "__main__":
    run_per_backend(parser(), main)
