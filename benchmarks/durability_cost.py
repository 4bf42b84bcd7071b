"""What `durability="always"` (appendfsync always) costs against the default everysec.

    python benchmarks/durability_cost.py [--episodes 300] [--facts-per-episode 3] [--repeats 3]

Each round opens a fresh embedded store per setting (the order alternates between rounds, so
neither setting always runs first on a warming machine) and times structured episodes added
one after another, as an agent or an import would: each episode is one write command, so
under `always` each pays one fsync before its reply. Also timed: kg.facts reads, which write
nothing and should cost the same under both. Prints episodes/s per setting and round, the
median, and the ratio of medians; the spread is the min..max over rounds.
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kg import KG
from kg.store.falkordb.embedded import Durability

START = datetime(2020, 1, 1, tzinfo=UTC)
SETTINGS: tuple[Durability, Durability] = ("everysec", "always")


def episode(i: int, per: int) -> dict[str, Any]:
    facts = [
        {"subject": f"Person {i}", "predicate": "KNOWS", "object": f"Person {i * per + j}"}
        for j in range(per)
    ]
    return {"source": "facts", "reference_time": START + timedelta(minutes=i), "facts": facts}


async def one_round(durability: Durability, episodes: int, per: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="kg-durability-") as tmp:
        async with await KG.open(home=Path(tmp), durability=durability) as kg:
            await kg.add_episode(**episode(-1, per))  # schema and first write out of the timing
            start = time.perf_counter()
            for i in range(episodes):
                await kg.add_episode(**episode(i, per))
            writes = episodes / (time.perf_counter() - start)
            start = time.perf_counter()
            for i in range(100):
                await kg.facts(subject=f"Person {i}")
            reads = 100 / (time.perf_counter() - start)
    return writes, reads


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--facts-per-episode", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    writes: dict[str, list[float]] = {s: [] for s in SETTINGS}
    reads: dict[str, list[float]] = {s: [] for s in SETTINGS}
    for r in range(args.repeats):
        order = SETTINGS if r % 2 == 0 else SETTINGS[::-1]
        for setting in order:
            w, q = await one_round(setting, args.episodes, args.facts_per_episode)
            writes[setting].append(w)
            reads[setting].append(q)
            print(f"round {r + 1} {setting:>8}: {w:7.1f} episodes/s  {q:7.1f} reads/s", flush=True)
    print(f"\n{args.episodes} episodes of {args.facts_per_episode} facts, {args.repeats} rounds")
    for setting in SETTINGS:
        w, q = writes[setting], reads[setting]
        print(
            f"{setting:>8}: writes median {statistics.median(w):7.1f}/s "
            f"(min..max {min(w):.1f}..{max(w):.1f}), reads median "
            f"{statistics.median(q):7.1f}/s"
        )
    ratio = statistics.median(writes["always"]) / statistics.median(writes["everysec"])
    print(f"always / everysec write throughput: {ratio:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
