"""Structured episodes through `KG.add_episodes` against a raw batched UNWIND floor of the
same graph, on each backend (issue 16, item 6, and issue 28: kg at >= 1/3 of the raw batched
rate, on FalkorDB and on Neo4j).

    python benchmarks/bulk_ingest.py [--episodes 1000 [10000 ...]] [--facts-per-episode 5]
                                     [--batch 200] [--repeats 3]
                                     [--backend falkordb|neo4j|both] [--uri URI]

The synthetic people of benchmarks/ingest_throughput.py (homes and employers that change,
closing the previous version; friendships). Each repeat ingests the same episodes into two
fresh groups:

1. kg: `add_episodes` (what `kg ingest` does): every episode validated, then the group's
   episodes in reference-time order, up to 200 at a time planned together (each against
   what the ones before it write) and written as one atomic, version-checked unit, with the
   next batch's planning read in the same query.
2. the floor: the nodes and edges kg's group ended with (every property, the search grams
   included), written back into an empty group with bare `UNWIND ... CREATE` statements,
   `--batch` episodes' worth per atomic write: no read, no planning, no validation. What kg
   adds on top of the store's own write cost is the gap between the two.

Printed: wall seconds per path and repeat, median and spread, episodes and facts per second,
kg's rate as a share of the floor's in each repeat, peak memory (this process, the server), and
both groups' counts (they must match).
Several `--episodes` sizes run one after the other in one run, each on a fresh store (the
people scale with the size: about ten facts each), and a last table puts them side by side
(issue 30: kg's share must not fall as the group grows).
Both paths take CPU time in two processes (kg's and the store server's), so on a loaded
machine wall times follow the share of the cores each gets; compare code versions run in turns.
So each repeat also prints the CPU time per episode of both processes on each path (this
process's `process_time`, the server's from /proc: the embedded FalkorDB's, or the Neo4j dev
server's; a server at --uri is not counted) and the floor's total as a share of kg's: what the
rate share comes to on an idle machine, where each path runs on its own core time. Both paths
write the same groups' worth into one store: on Neo4j, one database for every group, reads
and matches are by group, as kg's own are.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_store import (
    add_store_options,
    bench_kg,
    cpu_seconds,
    describe,
    run_per_backend,
    server_pid,
)

from benchmarks.ingest_throughput import make_episodes
from kg import KG
from kg.store.cypher.dialect import Statement
from kg.store.cypher.store import CypherStore


async def rows(kg: KG, group: str) -> dict[str, list[dict[str, Any]]]:
    q = kg.store.raw_query  # type: ignore[attr-defined]
    g = {"g": group}
    return {
        "episodes": [
            r["p"]
            for r in await q(
                group, "MATCH (n:Episodic) WHERE n.group_id = $g RETURN properties(n) AS p", g
            )
        ],
        "entities": [
            r["p"]
            for r in await q(
                group, "MATCH (n:Entity) WHERE n.group_id = $g RETURN properties(n) AS p", g
            )
        ],
        "mentions": await q(
            group,
            "MATCH (ep:Episodic)-[m:MENTIONS]->(n:Entity) WHERE ep.group_id = $g "
            "RETURN ep.uuid AS episode, n.uuid AS entity, properties(m) AS p",
            g,
        ),
        "edges": await q(
            group,
            "MATCH (s:Entity)-[e:RELATES_TO]->(o:Entity) WHERE e.group_id = $g "
            "RETURN s.uuid AS source, o.uuid AS target, properties(e) AS p",
            g,
        ),
    }


def regroup(data: dict[str, list[dict[str, Any]]], group: str) -> dict[str, list[Any]]:
    """`data` with every record's group_id set to `group` (one Neo4j database holds both)."""
    out: dict[str, list[Any]] = {}
    for kind, items in data.items():
        if kind in ("episodes", "entities"):
            out[kind] = [{**r, "group_id": group} for r in items]
        else:
            out[kind] = [{**r, "p": {**r["p"], "group_id": group}} for r in items]
    return out


async def floor(store: CypherStore, group: str, data: dict[str, list[Any]], writes: int) -> None:
    """`data` written back with bare UNWIND CREATEs in `writes` atomic units; a relationship
    goes in the first unit in which both its ends exist. Its ends are matched by uuid within
    the group, as kg matches them (the group's index on Neo4j)."""

    def chunk(i: int, n: int) -> int:
        return i * writes // max(n, 1)

    eps, ents = data["episodes"], data["entities"]
    ep_at = {r["uuid"]: chunk(i, len(eps)) for i, r in enumerate(eps)}
    ent_at = {r["uuid"]: chunk(i, len(ents)) for i, r in enumerate(ents)}
    units: list[dict[str, list[Any]]] = [
        {"episodes": [], "entities": [], "mentions": [], "edges": []} for _ in range(writes)
    ]
    for r in eps:
        units[ep_at[r["uuid"]]]["episodes"].append(r)
    for r in ents:
        units[ent_at[r["uuid"]]]["entities"].append(r)
    for i, m in enumerate(data["mentions"]):
        at = max(chunk(i, len(data["mentions"])), ep_at[m["episode"]], ent_at[m["entity"]])
        units[at]["mentions"].append(m)
    for i, e in enumerate(data["edges"]):
        at = max(chunk(i, len(data["edges"])), ent_at[e["source"]], ent_at[e["target"]])
        units[at]["edges"].append(e)
    g = {"group_id": group}
    for u in units:
        await store.execute(
            group,
            [
                Statement(
                    "UNWIND $eps AS r CREATE (n:Episodic) SET n += r", {"eps": u["episodes"]}
                ),
                Statement(
                    "UNWIND $ents AS r CREATE (n:Entity) SET n += r", {"ents": u["entities"]}
                ),
                Statement(
                    "UNWIND $mentions AS r MATCH (ep:Episodic {uuid: r.episode}) "
                    "WHERE ep.group_id = $group_id MATCH (n:Entity {uuid: r.entity}) "
                    "WHERE n.group_id = $group_id CREATE (ep)-[m:MENTIONS]->(n) SET m += r.p",
                    {"mentions": u["mentions"], **g},
                ),
                Statement(
                    "UNWIND $edges AS r MATCH (s:Entity {uuid: r.source}) WHERE s.group_id = "
                    "$group_id MATCH (o:Entity {uuid: r.target}) WHERE o.group_id = $group_id "
                    "CREATE (s)-[e:RELATES_TO]->(o) SET e += r.p",
                    {"edges": u["edges"], **g},
                ),
            ],
        )


def cpu_now(pid: int | None) -> tuple[float, float]:
    return time.process_time(), cpu_seconds(pid)


def cpu_ms(pid: int | None, since: tuple[float, float], n: int) -> tuple[float, float]:
    """ms per episode since `since`: (this process, the server)."""
    now = cpu_now(pid)
    return 1000 * (now[0] - since[0]) / n, 1000 * (now[1] - since[1]) / n


async def counts(kg: KG, group: str) -> tuple[int, ...]:
    q = kg.store.raw_query  # type: ignore[attr-defined]
    out = []
    for cypher in (
        "MATCH (n:Episodic) WHERE n.group_id = $g RETURN count(n) AS c",
        "MATCH (n:Entity) WHERE n.group_id = $g RETURN count(n) AS c",
        "MATCH ()-[m:MENTIONS]->() WHERE m.group_id = $g RETURN count(m) AS c",
        "MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $g RETURN count(e) AS c",
        "MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $g AND e.invalid_at IS NOT NULL "
        "RETURN count(e) AS c",
    ):
        out.append(int((await q(group, cypher, {"g": group}))[0]["c"]))
    return tuple(out)


def peak_memory(pid: int | None) -> str:
    """Peak resident memory: this process's since it started (sizes run in the order given,
    so a later, larger size's is its own), the server's (a fresh one per size)."""
    mine = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    server = "not counted"
    if pid is not None and (status := Path(f"/proc/{pid}/status")).exists():
        hwm = [ln for ln in status.read_text().splitlines() if ln.startswith("VmHWM:")]
        server = f"{int(hwm[0].split()[1]) / 1024:,.0f} MB" if hwm else server
    return f"\npeak memory: this process {mine:,.0f} MB, the server {server}"


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


async def one_size(args: argparse.Namespace, size: int) -> tuple[list[float], list[float]]:
    """The benchmark at `size` episodes on a fresh store: kg's share of the floor's rate,
    and the floor's CPU time as a share of kg's (empty when the server is not counted), per
    repeat."""
    per = args.facts_per_episode
    episodes = make_episodes(size * per, per, random.Random(args.seed))
    n = len(episodes)
    writes = math.ceil(n / args.batch)
    walls: dict[str, list[float]] = {"kg": [], "floor": []}
    cpus: dict[str, list[tuple[float, float]]] = {"kg": [], "floor": []}
    async with bench_kg(args) as kg:
        assert isinstance(kg.store, CypherStore)
        pid = server_pid(kg)
        print(f"\n## {await describe(kg, args)}", flush=True)
        for r in range(args.repeats):
            t0, c0 = time.perf_counter(), cpu_now(pid)
            result = await kg.add_episodes([{**e, "group_id": f"kg{r}"} for e in episodes])
            walls["kg"].append(time.perf_counter() - t0)
            cpus["kg"].append(cpu_ms(pid, c0, n))
            assert not result.failed, result.failed
            data = regroup(await rows(kg, f"kg{r}"), f"raw{r}")
            t0, c0 = time.perf_counter(), cpu_now(pid)
            await floor(kg.store, f"raw{r}", data, writes)
            walls["floor"].append(time.perf_counter() - t0)
            cpus["floor"].append(cpu_ms(pid, c0, n))
            print(
                f"repeat {r + 1}: "
                + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in walls.items())
                + "; CPU ms/episode (this process + server): "
                + ", ".join(f"{k} {c[-1][0]:.2f} + {c[-1][1]:.2f}" for k, c in cpus.items())
                + f"; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        facts = n * per
        print(
            f"\n# {n} structured episodes x {per} facts, floor in {writes} writes of "
            f"{args.batch} episodes, {args.repeats} repeats; median (min-max)\n"
        )
        print("| path | wall s | episodes/s | facts/s |\n|---|---|---|---|")
        for k, v in walls.items():
            m = statistics.median(v)
            print(f"| {k} | {spread(v)} | {n / m:,.0f} | {facts / m:,.0f} |")
        share = [f / k for k, f in zip(walls["kg"], walls["floor"], strict=True)]
        print(
            f"\nkg's rate as a share of the floor's, per repeat: "
            f"{', '.join(f'{x:.0%}' for x in share)} (median {statistics.median(share):.0%};"
            f" target >= 33%)"
        )
        by_cpu: list[float] = []
        if pid is not None:
            by_cpu = [sum(f) / sum(k) for k, f in zip(cpus["kg"], cpus["floor"], strict=True)]
            print(
                f"the floor's CPU time (both processes) as a share of kg's, per repeat: "
                f"{', '.join(f'{x:.0%}' for x in by_cpu)} "
                f"(median {statistics.median(by_cpu):.0%})"
            )
        print(peak_memory(pid))
        print("\n| group | episodes | entities | mentions | edge versions | closed |")
        print("|---|---|---|---|---|---|")
        for g in ("kg0", "raw0"):
            print("| " + " | ".join(str(x) for x in (g, *await counts(kg, g))) + " |")
    return share, by_cpu


async def main(args: argparse.Namespace) -> None:
    shares = {size: await one_size(args, size) for size in args.episodes}
    if len(shares) > 1:
        print("\n# kg's rate as a share of the floor's, by size (target >= 33% at each)\n")
        print("| episodes | per repeat | median | by CPU, per repeat | median |")
        print("|---|---|---|---|---|")
        for size, (share, by_cpu) in shares.items():
            cpu = ", ".join(f"{x:.0%}" for x in by_cpu) or "-"
            mid = f"{statistics.median(by_cpu):.0%}" if by_cpu else "-"
            each = ", ".join(f"{x:.0%}" for x in share)
            print(f"| {size:,} | {each} | {statistics.median(share):.0%} | {cpu} | {mid} |")


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, nargs="+", default=[1000])
    parser.add_argument("--facts-per-episode", type=int, default=5)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    add_store_options(parser)
    return parser


if __name__ == "__main__":
    run_per_backend(parser(), main)
