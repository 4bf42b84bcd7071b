"""Load on one `kg serve` (embedded store): N concurrent MCP clients over streamable HTTP
mixing add_memory and search_memory for a fixed time; then every acknowledged episode is
looked up in the graph. Prints errors, p50/p95 latency per operation, and the count.

    python benchmarks/serve_load.py [--clients 16] [--seconds 60] [--write-share 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.served import serve

CITIES = ["Paris", "Berlin", "Rome", "Oslo", "Lima", "Kyoto", "Cairo", "Quito"]


def pct(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


async def client(i: int, url: str, key: str, until: float, share: float, out: dict) -> None:
    rng = random.Random(i)
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http,
        streamable_http_client(url + "/mcp", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as s,
    ):
        await s.initialize()
        n = 0
        while time.monotonic() < until:
            n += 1
            write = rng.random() < share
            start = time.perf_counter()
            try:
                if write:
                    r = await s.call_tool(
                        "add_memory",
                        {
                            "source": "facts",
                            "facts": [
                                {
                                    "subject": f"person-{i}-{n}",
                                    "predicate": "LIVES_IN",
                                    "object": rng.choice(CITIES),
                                }
                            ],
                        },
                    )
                else:
                    r = await s.call_tool(
                        "search_memory", {"query": f"who lives in {rng.choice(CITIES)}"}
                    )
                ms = (time.perf_counter() - start) * 1000
                if r.is_error:
                    out["errors"].append(str(r.content)[:200])
                    continue
                out["add" if write else "search"].append(ms)
                if write:
                    out["acked"].append(r.structured_content["episode_id"])
            except Exception as exc:
                out["errors"].append(repr(exc)[:200])


async def load(url: str, key: str, clients: int, seconds: float, share: float) -> dict:
    out: dict = {"add": [], "search": [], "acked": [], "errors": []}
    until = time.monotonic() + seconds
    await asyncio.gather(*(client(i, url, key, until, share, out) for i in range(clients)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--write-share", type=float, default=0.5)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="kg-serve-load-")) / "home"
    # One key for every client: its per-key limits (8 in flight, 20/s by default) would make
    # this a benchmark of the 429s; raised to none.
    served = serve(home, [("load", "admin")], "--key-concurrency", "0", "--key-rate", "0")
    try:
        t0 = time.monotonic()
        out = asyncio.run(
            load(
                served.url,
                served.key("load", "admin"),
                args.clients,
                args.seconds,
                args.write_share,
            )
        )
        wall = time.monotonic() - t0
        with served.client("load") as c:
            stored: set[str] = set()
            page: dict = {"next_cursor": None}
            while True:  # every page of the episode list
                params = {"limit": 1000, "cursor": page["next_cursor"]}
                page = c.get("/v1/episodes", params={k: v for k, v in params.items() if v}).json()
                stored |= {e["uuid"] for e in page["items"]}
                if not page["next_cursor"]:
                    break
            episodes = c.get("/v1/stats").json()["stats"]["episodes"]
            missing = [u for u in out["acked"] if u not in stored]
    finally:
        code = served.stop()
    print(
        f"{args.clients} clients, {args.seconds:.0f} s ({wall:.1f} s wall), write share "
        f"{args.write_share}: errors {len(out['errors'])}"
    )
    for op in ("add", "search"):
        xs = out[op]
        print(
            f"  {op}_memory: {len(xs)} calls, {len(xs) / wall:.1f}/s, p50 {pct(xs, 0.5):.1f} ms, "
            f"p95 {pct(xs, 0.95):.1f} ms, mean {statistics.fmean(xs) if xs else 0:.1f} ms"
        )
    print(
        f"  acknowledged episodes {len(out['acked'])}, in the graph {episodes}, "
        f"acknowledged but missing {len(missing)}; server exit code {code}"
    )
    for e in out["errors"][:5]:
        print("  error:", e)


if __name__ == "__main__":
    main()
