"""One tenant hammering lists and context must not slow another: the quiet tenant's latency
on one `kg serve`, idle and while a noisy tenant (another group, its own key) runs
`--hammer` concurrent loops of `GET /v1/episodes?limit=1` and `POST /v1/context` (the
costliest one allowed) as fast as answers come back (429s included, Retry-After ignored:
the worst client). `--context plain` sends the default context instead, `--mix` only one
kind.

The noisy group holds `--episodes` text episodes (stored unextracted, ~400 characters each)
and facts; the quiet tenant reads `GET /v1/facts?subject=...`, `--rate` a second. The
noisy load runs in a process of its own, so the measuring client does not share its event
loop. Prints, per repeat, the quiet tenant's p50 / p95 idle and loaded, their ratio, and
the noisy tenant's answers by status; then the median and range of the ratios. Run it from a
checkout (it starts that checkout's `kg serve`), e.g. main's to compare:

    nice python benchmarks/tenant_isolation.py [--episodes 1200] [--hammer 8] [--seconds 10]
        [--repeats 3] [--home /work/runs/me/tenants] [-- extra kg serve flags]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))
from kg import KG  # noqa: E402
from tests.served import Served, free_port, make_keys  # noqa: E402

CONTEXTS = {
    # The costliest context a request may ask for (the caps of ContextRequest), over every
    # scope (the recipe MCP's search_memory uses), its words in every episode.
    "costly": {
        "query": "garden budget trip",
        "recipe": "combined_hybrid_rrf",
        "limit": 100,
        "max_tokens": 20_000,
    },
    # The default context (facts), about facts that exist.
    "plain": {"query": "who lives in Lima"},
}
WHEN = datetime(2024, 1, 1, tzinfo=UTC)
TEXT = "the team met again on tuesday and talked about the garden the budget and the trip"
WORDS = TEXT.split()


def pct(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


async def seed(home: Path, episodes: int) -> None:
    """The noisy group: `episodes` unextracted text episodes and some facts; the quiet
    group: a few facts."""
    async with await KG.open(home=home) as kg:
        for i in range(episodes):
            text = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(70)) + f" (note {i})"
            await kg.add_episode(
                source="text",
                content=text,
                reference_time=WHEN,
                group_id="noisy",
                extract=False,
                name=f"note {i}",
            )
            if i % 10 == 0:
                await kg.add_episode(
                    source="facts",
                    reference_time=WHEN,
                    group_id="noisy",
                    facts=[{"subject": f"Person {i}", "predicate": "LIVES_IN", "object": "Lima"}],
                )
        for name, city in (("Ada", "Oslo"), ("Ben", "Rome"), ("Cy", "Kyoto")):
            await kg.add_episode(
                source="facts",
                reference_time=WHEN,
                group_id="quiet",
                facts=[{"subject": name, "predicate": "LIVES_IN", "object": city}],
            )


def quiet(url: str, key: str, seconds: float, rate: float) -> list[float]:
    """The quiet tenant: a request every 1/rate s (or on the last one's answer, if later:
    never a burst to catch up) for `seconds`; latencies in ms."""
    out: list[float] = []
    names = ["Ada", "Ben", "Cy"]
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
        until = time.monotonic() + seconds
        i = 0
        while (now := time.monotonic()) < until:
            sent = time.perf_counter()
            r = c.get("/v1/facts", params={"subject": names[i % 3]})
            out.append((time.perf_counter() - sent) * 1000)
            assert r.status_code == 200, r.text
            i += 1
            time.sleep(max(0.0, now + 1 / rate - time.monotonic()))  # no catching up in bursts
    return out


async def _hammer(
    url: str, key: str, loops: int, seconds: float, mix: str, context: dict[str, Any]
) -> dict[str, int]:
    counts: collections.Counter[str] = collections.Counter()
    limits = httpx.Limits(max_connections=loops)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=120) as c:
        until = time.monotonic() + seconds

        async def loop(n: int) -> None:
            i = n
            while time.monotonic() < until:
                i += 1
                if mix == "lists" or (mix == "both" and i % 2):
                    r = await c.get("/v1/episodes", params={"limit": 1})
                else:
                    r = await c.post("/v1/context", json=context)
                counts[f"{r.request.url.path.rsplit('/', 1)[1]} {r.status_code}"] += 1

        await asyncio.gather(*(loop(n) for n in range(loops)))
    return dict(counts)


def hammer(
    url: str, key: str, loops: int, seconds: float, mix: str, context: dict[str, Any], out: Any
) -> None:
    # Niced: the noisy client would run on machines of its own; here it shares the server's
    # cores, and its own CPU use should not count as the server's unfairness.
    os.nice(10)
    out.put(asyncio.run(_hammer(url, key, loops, seconds, mix, context)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=1200)
    ap.add_argument("--hammer", type=int, default=8, help="concurrent noisy loops")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=10.0, help="quiet requests a second")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--mix",
        choices=["both", "lists", "context"],
        default="both",
        help="what the noisy loops send: both alternately, or one of them",
    )
    ap.add_argument(
        "--context",
        choices=sorted(CONTEXTS),
        default="costly",
        help="the noisy tenant's context request",
    )
    ap.add_argument("--home", type=Path, default=None, help="scratch data directory")
    ap.add_argument("serve_args", nargs="*", help="extra kg serve flags (after --)")
    args = ap.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="kg-tenants-"))
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    started = time.monotonic()
    asyncio.run(seed(home, args.episodes))
    keys = asyncio.run(make_keys(home, [("noisy", "admin"), ("quiet", "read")]))
    print(
        f"seeded {args.episodes} episodes in {time.monotonic() - started:.0f} s; "
        f"checkout {ROOT}; load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    served = Served(home=home, port=free_port(), keys=keys)
    served.start(*args.serve_args)
    ratios = []
    try:
        url, noisy, calm = served.url, keys[("noisy", "admin")], keys[("quiet", "read")]
        quiet(url, calm, 2, args.rate)  # warm up
        context = CONTEXTS[args.context]
        for rep in range(args.repeats):
            idle = quiet(url, calm, args.seconds, args.rate)
            box: Any = multiprocessing.Queue()
            proc = multiprocessing.Process(
                target=hammer,
                args=(url, noisy, args.hammer, args.seconds + 2, args.mix, context, box),
            )
            proc.start()
            time.sleep(1.0)  # the noisy loops under way
            loaded = quiet(url, calm, args.seconds, args.rate)
            counts = box.get()
            proc.join()
            ratio = pct(loaded, 0.95) / pct(idle, 0.95)
            ratios.append(ratio)
            print(
                f"repeat {rep + 1}: quiet p50/p95 idle {pct(idle, 0.5):.1f}/{pct(idle, 0.95):.1f} "
                f"ms ({len(idle)} req), loaded {pct(loaded, 0.5):.1f}/{pct(loaded, 0.95):.1f} ms "
                f"({len(loaded)} req): p95 x{ratio:.1f}; noisy {dict(sorted(counts.items()))}; "
                f"load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    finally:
        served.stop()
    print(
        f"quiet p95 loaded / idle: median x{statistics.median(ratios):.1f} "
        f"(range x{min(ratios):.1f} - x{max(ratios):.1f}, {len(ratios)} repeats)"
    )


if __name__ == "__main__":
    main()
