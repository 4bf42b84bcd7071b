"""Workers SIGKILLed at random moments while they empty the queue: the graph they leave equals a
clean one-by-one ingest, nothing is lost, nothing is written twice, and an extraction is asked
for again only when a kill came between the model's answer and the worker keeping it.

Several worker processes (tests/crash_worker.py) share one FalkorDB server on loopback. The
default run queues 200 message episodes in two groups and kills 20 times; with KG_LONG_TESTS=1
the long version (marked `long`) queues 500 and kills 40 times. Each kill waits for a random
moment and for an episode written since the last one, and more of the conversation is queued
whenever the queue runs dry before the kills have all landed: the run holds on a fast machine
and a loaded one alike.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from kg import KG
from kg.schemas.graph import EpisodeStatus
from tests.falkordb_server import falkordb_server
from tests.queue_llm import RuleLLM, conversation
from tests.test_queue import episodes_of, snapshot

ROOT = Path(__file__).resolve().parents[1]
LONG = os.environ.get("KG_LONG_TESTS") == "1"


def spawn(uri: str, log: Path, groups: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.crash_worker", uri, str(log), *groups],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def unfinished(kg: KG, groups: list[str]) -> int:
    total = 0
    for g in groups:
        m = await kg.store.queue_metrics(g, kg.clock.now())
        total += m.queued + m.processing
    return total


async def done(kg: KG, groups: list[str]) -> int:
    total = 0
    for g in groups:
        total += (await kg.store.queue_metrics(g, kg.clock.now())).done
    return total


async def crash_run(tmp: Path, episodes: int, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    log = tmp / "extractions.jsonl"
    groups = ["crash-a", "crash-b"]
    per_group = episodes // 2
    # conversation() is prefix-stable: a run that needs more episodes queues the next ones.
    pool = {g: conversation(per_group * 20, seed=seed + i) for i, g in enumerate(groups)}
    sent = dict.fromkeys(groups, 0)
    with falkordb_server(tmp / "falkordb") as uri:
        kg = await KG.open(uri, llm=RuleLLM())
        try:

            async def enqueue(n: int) -> None:
                for g in groups:
                    for ep in pool[g][sent[g] : sent[g] + n]:
                        await kg.add_episode(**ep, group_id=g, wait=False)
                    sent[g] = min(len(pool[g]), sent[g] + n)
                assert all(sent[g] < len(pool[g]) for g in groups), "the conversation ran out"

            await enqueue(per_group)
            workers = [spawn(uri, log, groups) for _ in range(3)]
            killed = topups = 0
            # Kills are paced by the workers' progress, not the clock: each lands after a
            # random number of completed episodes (mean: the queue shared out among the
            # kills), at a random moment, while work is in flight. A fast machine cannot empty
            # the queue before the kills land and a slow one does not lose them: if the queue
            # runs dry anyway, more of the conversation is queued (counted as top-ups).
            gap = max(1, episodes // (kills + 1))
            t0 = time.monotonic()
            try:
                while killed < kills:
                    # A random moment, after at least one episode was written since the last
                    # kill (so kills do not all fall on workers still starting), with work
                    # left for the killed worker to be in the middle of.
                    wake = time.monotonic() + rng.uniform(0.2, 1.2)
                    target = await done(kg, groups) + 1
                    stalled = time.monotonic() + 300
                    while time.monotonic() < wake or await done(kg, groups) < target:
                        assert time.monotonic() < stalled, "the workers made no progress"
                        if not await unfinished(kg, groups):
                            await enqueue(gap)
                            topups += 1
                        await asyncio.sleep(0.05)
                    i = rng.randrange(len(workers))
                    workers[i].send_signal(signal.SIGKILL)
                    workers[i].wait()
                    killed += 1
                    workers[i] = spawn(uri, log, groups)
                deadline = time.monotonic() + 300
                while await unfinished(kg, groups):
                    assert time.monotonic() < deadline, "the workers did not finish the queue"
                    await asyncio.sleep(0.2)
            finally:
                for _ in range(1200):  # up to 120 s: SIGTERM is a graceful stop once it runs
                    if all(
                        (tmp / f"ready-{w.pid}").exists() or w.poll() is not None for w in workers
                    ):
                        break
                    await asyncio.sleep(0.1)
                for w in workers:
                    w.send_signal(signal.SIGTERM)
                errors = [w.communicate(timeout=30)[1].decode() for w in workers]
            wall = time.monotonic() - t0
            assert all(w.returncode == 0 for w in workers), errors
            for g in groups:  # the reference: the same episodes one by one, in order
                for ep in pool[g][: sent[g]]:
                    await kg.add_episode(**ep, group_id=f"clean-{g}")

            rows = [json.loads(line) for line in log.read_text().splitlines()]
            calls = Counter((r["at"], r["episode"]) for r in rows)
            for g in groups:
                nodes = await episodes_of(kg, g)
                # Nothing lost, nothing stuck, one node per episode.
                assert len(nodes) == len(await episodes_of(kg, f"clean-{g}"))
                assert {n.status for n in nodes} == {EpisodeStatus.ingested}
                assert all(n.lease_owner is None and n.staged is None for n in nodes)
                # Written once: no version cites an episode twice; the graph is the clean one.
                for f in await kg.history(group_id=g, limit=100_000):
                    assert len(f.edge.episodes) == len(set(f.edge.episodes))
                assert await snapshot(kg, g) == await snapshot(kg, f"clean-{g}")
            # An episode is its text at its time (the groups may share some: counted as many).
            nodes = [n for g in groups for n in await episodes_of(kg, g)]
            expected = Counter((n.valid_at.isoformat(), n.content) for n in nodes)
            assert set(calls) == set(expected)  # every episode was extracted...
            again = sum(calls[k] - expected[k] for k in expected)
            assert again >= 0
            # ...and again only when a kill fell between an answer and its staging: each kill
            # can strike at most the calls in flight in the killed worker (its concurrency).
            assert again <= killed * 8
            takeovers = sum(n.attempts - 1 for n in nodes)
            print(
                f"\n{sum(sent.values())} episodes ({topups} top-ups), {killed} kills, "
                f"{wall:.0f} s: {takeovers} claims "
                f"lapsed and taken over, {again} extraction calls repeated "
                f"({sum(calls.values())} calls in all)"
            )
        finally:
            await kg.close()


async def test_killed_workers_leave_the_graph_a_clean_ingest_would(tmp_path: Path) -> None:
    await crash_run(tmp_path, episodes=200, kills=20, seed=1)


@pytest.mark.long
@pytest.mark.skipif(not LONG, reason="the long crash run: set KG_LONG_TESTS=1")
async def test_killed_workers_long(tmp_path: Path) -> None:
    await crash_run(tmp_path, episodes=500, kills=40, seed=2)
