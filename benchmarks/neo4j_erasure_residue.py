"""What an erased subject leaves in Neo4j's files, stage by stage, and the procedure that
removes it (docs/production.md#erasure-on-neo4j).

    python benchmarks/neo4j_erasure_residue.py [--episodes 300]

On a Neo4j 5.26 Community dev server of its own (docker/neo4j-dev/run, a fresh directory), kg
writes `--episodes` episodes about other people and a few naming the subject (structured
facts, and unextracted text that BM25 indexes), erases the subject with `kg erase --subject`,
then greps every file of the server's directory for the subject's name (bytes, ASCII case
folded) after each stage:

1. right after the erasure (server running);
2. after a clean restart (a checkpoint flushes the page cache to the store files);
3. after a restart with the strictest transaction-log retention (`keep_none`, rotation at
   the 128 KiB minimum), enough later writes to rotate the log twice, and another restart;
4. after the procedure: every group exported (`kg groups`, `kg export`), the server stopped,
   its directory deleted, a server started on a new directory, every group imported.

Each stage prints the files that still hold the name, and the run ends with the groups'
counts before and after the procedure (they must be equal).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_store import DevServer as Server  # noqa: E402

SECRET = "Zebulon Quisling"
STRICT_LOGS = ["db.tx_log.rotation.retention_policy=keep_none", "db.tx_log.rotation.size=128k"]


def kg(uri: str, *args: str, stdin: str | None = None) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "kg.cli", "--uri", uri, *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if r.returncode != 0:
        raise SystemExit(f"kg {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def holding(root: Path, needle: str = SECRET) -> list[str]:
    """Files under root whose bytes hold the needle, either half of it, ASCII case folded."""
    words = [needle.lower().encode(), *(w.lower().encode() for w in needle.split())]
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            body = path.read_bytes().lower()
            if any(w in body for w in words):
                found.append(f"{path.relative_to(root)} ({path.stat().st_size:,} B)")
    return found


def episodes(n: int) -> str:
    t0 = datetime(2020, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(n):
        who, friend = f"Person {i:04d}", f"Person {(i + 1) % n:04d}"
        facts = [
            {"subject": who, "predicate": "LIVES_IN", "object": f"City {i % 37}"},
            {"subject": who, "predicate": "KNOWS", "object": friend},
        ]
        when = (t0 + timedelta(days=i)).isoformat()
        rows.append({"source": "facts", "reference_time": when, "facts": facts})
    for j, city in enumerate(["Seoul", "Busan", "Daegu"]):
        when = (t0 + timedelta(days=n + j)).isoformat()
        rows.append(
            {
                "source": "facts",
                "reference_time": when,
                "facts": [
                    {"subject": SECRET, "predicate": "LIVES_IN", "object": city},
                    {"subject": SECRET, "predicate": "KNOWS", "object": "Person 0001"},
                ],
            }
        )
    rows.append(
        {
            "source": "text",
            "reference_time": t0.isoformat(),
            "content": f"{SECRET} wrote to the council about the harbour.",
        }
    )
    return "\n".join(json.dumps(r) for r in rows)


def filler(n: int, start: int) -> str:
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    return "\n".join(
        json.dumps(
            {
                "source": "text",
                "reference_time": (t0 + timedelta(minutes=start + i)).isoformat(),
                "content": f"Filler note {start + i}: " + "lorem ipsum dolor sit amet " * 20,
            }
        )
        for i in range(n)
    )


def report(stage: str, root: Path) -> list[str]:
    found = holding(root)
    print(f"\n== {stage}: {len(found)} files hold the name")
    for f in found:
        print(f"   {f}")
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=300)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kg-neo4j-erasure-"))
    password = secrets.token_hex(8)
    a = Server(work / "a", password)
    b: Server | None = None
    t_start = time.monotonic()
    try:
        a.start()
        print(kg(a.uri, "ingest", "--no-extract", "-", stdin=episodes(args.episodes)).strip())
        print(
            kg(
                a.uri,
                "--group",
                "other",
                "ingest",
                "--no-extract",
                "-",
                stdin=episodes(20).replace(SECRET, "Someone Else"),
            ).strip()
        )
        print(kg(a.uri, "erase", "--subject", SECRET, "--yes").strip())
        report("1. after `kg erase`, server running", work / "a")
        a.stop()
        a.start()
        report("2. after a clean restart (checkpoint)", work / "a")
        a.stop()
        a = Server(work / "a", password, STRICT_LOGS).start()
        for round_ in range(2):
            kg(
                a.uri,
                "--group",
                "filler",
                "ingest",
                "--no-extract",
                "-",
                stdin=filler(150, 150 * round_),
            )
        a.stop()
        a.start()
        report("3. keep_none log retention, 128k rotation, later writes, restarts", work / "a")

        # The procedure: export every group, stop, delete the directory, start anew, import.
        dumps = work / "dumps"
        dumps.mkdir()
        groups = json.loads(kg(a.uri, "groups", "--json"))
        before = {}
        for g in groups:
            kg(a.uri, "--group", g, "export", "-o", str(dumps / f"{g}.jsonl"))
            before[g] = json.loads(kg(a.uri, "--group", g, "stats", "--json"))
        a.stop()
        shutil.rmtree(work / "a")
        b = Server(work / "b", password).start()
        for g in groups:
            kg(b.uri, "import", str(dumps / f"{g}.jsonl"))
        found = report("4. after export, new directory, import", work / "b")
        dumped = [d for d in holding(dumps)]
        print(f"   (the export files holding the name: {len(dumped)})")
        after = {g: json.loads(kg(b.uri, "--group", g, "stats", "--json")) for g in groups}
        same = all(
            {k: v for k, v in before[g].items() if k != "queries"}
            == {k: v for k, v in after[g].items() if k != "queries"}
            for g in groups
        )
        print(f"\ngroups {groups}: counts equal before and after the procedure: {same}")
        print(
            f"total {time.monotonic() - t_start:.0f} s; load average "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        if found or dumped or not same:
            raise SystemExit(1)
    finally:
        a.stop()
        if b is not None:
            b.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
