"""Where exact cosine over a group's own facts stops beating Neo4j's shared vector index.

    python benchmarks/neo4j_cosine_crossover.py --uri bolt://neo4j:PASSWORD@host:port
        [--sizes 1000 3000 10000 30000 100000] [--queries 30] [--rounds 3]

On a Neo4j server holding benchmarks/search_latency.py's groups (load them first:
`search_latency.py --fill-only --uri URI --sizes ...`), every group shares one fact vector
index. For each group, the cosine branch's read (`rank_vector`, the default search's window
of 50) is timed both ways on the same query vectors, in turns within each round:
- index: the shared vector index, over-fetching and widening k until 50 hits are in the
  group and in view (what kg did on Neo4j for every group before the exact path);
- exact: the group's own facts, found through its (group, name) index and scored with
  `vector.similarity.cosine` (kg.store.neo4j.cosine).
Printed per group: p50 / p95 ms of each (median of the rounds' figures, min-max across rounds),
and the index's recall@10 against the exact top 10 (ties at the cut count as found). The
crossover is the group size above which the index is faster; kg.store.neo4j.cosine's
EXACT_COSINE_MAX is set from it. Needs `--uri`: the groups take minutes to load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.search_latency import QUERIES, group_of
from kg import KG
from kg.ingest.embeddings import local_minilm
from kg.schemas.search import Scope, SearchView
from kg.store.cypher.search import CypherSearch
from kg.store.neo4j import Neo4jStore
from kg.store.neo4j.cosine import exact_query

WINDOW = 50  # SearchConfig.window: what the default search's cosine branch asks for


async def index_path(store: Neo4jStore, group: str, v: list[float], view: SearchView) -> Any:
    # The shared code's path, past the Neo4j store's own choice.
    return await CypherSearch._vector_rows(store, group, Scope.facts, v, view, WINDOW, full=False)


async def exact_path(store: Neo4jStore, group: str, v: list[float], view: SearchView) -> Any:
    cypher = exact_query(Scope.facts, view, store._vector_row(Scope.facts, full=False))
    params = {**store._view_params(group, view), "v": v, "k": WINDOW}
    rows = await store._read(group, cypher, params)
    return [(store.dialect.similarity(float(r["score"])), r["row"]) for r in rows if r["ok"]]


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def recall_at_10(index: list[Any], exact: list[Any]) -> float:
    """Share of the exact top 10 the index found, ties at the cut counted as found."""
    top = exact[:10]
    if not top:
        return 1.0
    cut = round(top[-1][0], 5)
    found = {u for _, u in index[:10]}
    hits = sum(1 for s, u in top if u in found or round(s, 5) == cut)
    return min(1.0, hits / len(top))


async def main(args: argparse.Namespace) -> None:
    embedder = local_minilm()
    vectors = await embedder.embed([QUERIES[i % len(QUERIES)] for i in range(args.queries)])
    now = datetime.now(UTC)
    view = SearchView(valid_at=now, known_at=now)
    async with await KG.open(args.uri) as kg:
        store = kg.store
        assert isinstance(store, Neo4jStore), "a Neo4j --uri"
        [total] = await store.raw_query("", "MATCH ()-[e:RELATES_TO]->() RETURN count(e) AS n")
        print(
            f"# Neo4j cosine branch: shared index against exact, {args.queries} queries x "
            f"{args.rounds} rounds; {total['n']:,} facts in the database; load "
            f"{os.getloadavg()[0]:.1f} at start"
        )
        figures: dict[tuple[int, str], list[tuple[float, float]]] = {}
        recalls: dict[int, list[float]] = {}
        for _ in range(args.rounds):
            for size in args.sizes:
                group = group_of(size)
                times: dict[str, list[float]] = {"index": [], "exact": []}
                for v in vectors:
                    got = {}
                    for name, path in (("index", index_path), ("exact", exact_path)):
                        t0 = time.perf_counter()
                        got[name] = await path(store, group, v, view)
                        times[name].append((time.perf_counter() - t0) * 1000)
                    recalls.setdefault(size, []).append(recall_at_10(got["index"], got["exact"]))
                for name, ts in times.items():
                    figures.setdefault((size, name), []).append((pct(ts, 50), pct(ts, 95)))
                print(
                    f"{size:>9,}: index p50 {pct(times['index'], 50):.1f} ms, exact p50 "
                    f"{pct(times['exact'], 50):.1f} ms; load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
        print("\n| group facts | index p50 / p95 ms | exact p50 / p95 ms | index recall@10 |")
        print("|---|---|---|---|")
        for size in args.sizes:
            cells = []
            for name in ("index", "exact"):
                runs = figures[(size, name)]
                p50s, p95s = [r[0] for r in runs], [r[1] for r in runs]
                cells.append(
                    f"{statistics.median(p50s):.1f} / {statistics.median(p95s):.1f} "
                    f"({min(p50s):.1f}-{max(p50s):.1f} / "
                    f"{min(p95s):.1f}-{max(p95s):.1f})"
                )
            print(f"| {size:,} | {cells[0]} | {cells[1]} | {statistics.fmean(recalls[size]):.3f} |")
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--uri", required=True, help="a Neo4j server holding the groups")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000, 10_000, 30_000, 100_000])
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(ap.parse_args()))
