"""What a placed store (kg.store.placed) costs over the store it routes to: the same
structured ingest (one episode a call) and `kg.facts` reads, on one embedded FalkorDB store
opened alone and on an embedded store opened as the default of `KG_STORES` (its placement
table on a second embedded store), in the same run. Prints each side's episodes/s and facts
p50/p95, the ratios placed/alone, and the directory reads the placed side made per episode
(a read whose answer is empty reads the group's row again: what that costs is here). Repeats
alternate the order; the median and range of the ratios are printed.

    nice python benchmarks/placement_overhead.py [--episodes 300] [--reads 300] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))
from kg import KG  # noqa: E402
from kg.store.placed import PlacedStore  # noqa: E402

START = datetime(2020, 1, 1, tzinfo=UTC)


def pct(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))]


async def run(kg: KG, episodes: int, reads: int) -> tuple[float, float, float]:
    """Episodes/s of the ingest, then p50 and p95 (ms) of `facts` for one subject."""
    began = time.perf_counter()
    for i in range(episodes):
        facts = [{"subject": f"person{i % 50}", "predicate": "LIVES_IN", "object": f"town{i}"}]
        await kg.add_episode(source="facts", reference_time=START + timedelta(days=i), facts=facts)
    rate = episodes / (time.perf_counter() - began)
    took = []
    for i in range(reads):
        t0 = time.perf_counter()
        await kg.facts(subject=f"person{i % 50}")
        took.append((time.perf_counter() - t0) * 1000)
    return rate, pct(took, 0.5), pct(took, 0.95)


async def side(placed: bool, root: Path, args: argparse.Namespace) -> tuple[float, ...]:
    where = {"stores": f"a=embedded:{root / 'a'},d=embedded:{root / 'd'}", "placement": "d"}
    kg = await (KG.open(**where) if placed else KG.open(home=root / "alone"))
    async with kg:
        counted = 0
        if isinstance(kg.store, PlacedStore):
            table, reads = kg.store.directory, kg.store.directory.placement

            async def counting(group_id: str) -> object:
                nonlocal counted
                counted += 1
                return await reads(group_id)

            table.placement = counting  # type: ignore[method-assign]
        rate, p50, p95 = await run(kg, args.episodes, args.reads)
    return rate, p50, p95, counted / args.episodes


async def main(args: argparse.Namespace) -> None:
    ratios: dict[str, list[float]] = {"ingest": [], "p50": [], "p95": []}
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            order = [False, True] if repeat % 2 == 0 else [True, False]
            got = {p: await side(p, Path(tmp) / str(p), args) for p in order}
        alone, placed = got[False], got[True]
        print(
            f"repeat {repeat + 1}: alone {alone[0]:.0f} episodes/s, facts p50/p95 "
            f"{alone[1]:.2f}/{alone[2]:.2f} ms; placed {placed[0]:.0f} episodes/s, "
            f"{placed[1]:.2f}/{placed[2]:.2f} ms, {placed[3]:.2f} directory reads/episode"
        )
        ratios["ingest"].append(placed[0] / alone[0])
        ratios["p50"].append(placed[1] / alone[1])
        ratios["p95"].append(placed[2] / alone[2])
    for name, xs in ratios.items():
        print(
            f"placed/alone {name}: median {statistics.median(xs):.2f} "
            f"(range {min(xs):.2f}-{max(xs):.2f}, {len(xs)} repeats)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--reads", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
