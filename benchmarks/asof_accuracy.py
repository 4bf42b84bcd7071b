"""As-of accuracy on temporal update chains: share of probes kg.facts answers exactly.

    python benchmarks/asof_accuracy.py [DATA_DIR] [--limit N] [--seed S]
        [--backend falkordb|neo4j|both]

DATA_DIR defaults to ../shared/data. Two sets, each ingested as structured episodes into the
store `--backend` names (benchmarks/bench_store.py: a throwaway embedded FalkorDB, a
throwaway Neo4j dev server, or both in turn), in a shuffled arrival order, so that late,
out-of-order facts are part of the test:

- YAGO11k: dated (subject, relation, object) facts with [valid_from, valid_to] years,
  inclusive; relations overlap in time, so they are multi-valued. Probe: the objects true
  during year Y (asked at mid-year).
- SituatedQA: a question's answer versions, each from its valid_from on; one answer at a
  time, so the predicate is single-valued and each version must supersede the previous one.
  Probe: the answer at a year or date.

A probe is scored exact when the set of returned objects equals the expected set, comparing
names by kg's entity key (case, width and spacing folded). Records and probes the data cannot
support are counted as not well-formed, each with its reason, and never scored.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_store import add_store_options, bench_kg, describe, run_per_backend

from kg import KG, Ontology, Predicate
from kg.ingest.names import name_key

ANSWER = "ANSWER"
ONTOLOGY = Ontology(
    name="asof-bench",
    predicates=[
        Predicate(name=ANSWER, cardinality="one"),
        *(
            Predicate(name=r, cardinality="many")
            for r in ("IS_AFFILIATED_TO", "PLAYS_FOR", "IS_MARRIED_TO", "WORKS_AT")
        ),
    ],
    strict=True,
)
# Every episode's reference time; each fact carries its own valid_at, so this is only a label.
INGEST_REF = datetime(2030, 1, 1, tzinfo=UTC)


@dataclass
class Tally:
    name: str
    probes: int = 0
    exact: int = 0
    skipped: collections.Counter[str] = field(default_factory=collections.Counter)
    misses: list[str] = field(default_factory=list)
    facts: int = 0
    episodes: int = 0
    ingest_s: float = 0.0
    query_s: float = 0.0

    def score(self, label: str, expected: set[str], got: set[str]) -> None:
        self.probes += 1
        if got == expected:
            self.exact += 1
        else:
            self.misses.append(f"{label}: expected {sorted(expected)}, got {sorted(got)}")

    def report(self) -> None:
        pct = 100.0 * self.exact / self.probes if self.probes else 0.0
        print(f"\n## {self.name}")
        print(
            f"ingested {self.episodes} episodes / {self.facts} facts in {self.ingest_s:.1f}s; "
            f"{self.probes} probes asked in {self.query_s:.1f}s"
        )
        print(f"exact: {self.exact}/{self.probes} = {pct:.2f}% of well-formed probes")
        for reason, n in self.skipped.most_common():
            if n == 0:  # records without probes: nothing left unscored
                continue
            print(f"  not well-formed, not scored: {n:5d}  {reason}")
        for m in self.misses[:20]:
            print(f"  MISS {m}")


def year(y: int, month: int = 1, day: int = 1) -> datetime:
    return datetime(y, month, day, tzinfo=UTC)


def parse_when(text: str) -> datetime:
    """'2017', '1996-01-28' or 'February 05, 2017' (the formats the data uses)."""
    text = text.strip()
    if len(text) == 4 and text.isdigit():
        return year(int(text))
    for fmt in ("%Y-%m-%d", "%B %d, %Y"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            pass
    raise ValueError(f"unrecognised date {text!r}")


def clean(entity: str) -> str:
    return entity.strip().removeprefix("<").removesuffix(">").replace("_", " ")


async def answer(kg: KG, group: str, subject: str, predicate: str, at: datetime) -> set[str]:
    facts = await kg.facts(group_id=group, subject=subject, predicate=predicate, valid_at=at)
    return {name_key(f.object) for f in facts}


async def run_yago(kg: KG, path: Path, limit: int | None, rng: random.Random) -> Tally:
    tally = Tally("YAGO11k as-of (multi-valued, explicit intervals)")
    records = [json.loads(line) for line in path.open()][:limit]
    episodes: list[tuple[dict[str, Any], str]] = []
    scored: list[dict[str, Any]] = []
    for r in records:
        facts = r["facts"]
        if any(f.get("valid_from") is None for f in facts):
            tally.skipped["a fact has no valid_from"] += len(r["probes"])
            continue
        if any(f.get("valid_to") is not None and f["valid_to"] < f["valid_from"] for f in facts):
            tally.skipped["a fact ends before it starts"] += len(r["probes"])
            continue
        scored.append(r)
        for f in facts:
            fact = {
                "subject": clean(r["subject"]),
                "predicate": clean(r["relation"]),
                "object": clean(f["object"]),
                "valid_at": year(f["valid_from"]).isoformat(),
            }
            if f.get("valid_to") is not None:  # inclusive year: true until next Jan 1
                fact["invalid_at"] = year(f["valid_to"] + 1).isoformat()
            episodes.append((fact, "yago"))
    await ingest(kg, episodes, rng, tally)
    t0 = time.perf_counter()
    for r in scored:
        subject, predicate = clean(r["subject"]), ONTOLOGY.resolve_predicate(clean(r["relation"]))
        for p in r["probes"]:
            expected = {name_key(clean(o)) for o in p["expected"]}
            got = await answer(kg, "yago", subject, predicate.name, year(p["as_of_year"], 7, 1))
            tally.score(f"{subject} {predicate.name} @{p['as_of_year']}", expected, got)
    tally.query_s = time.perf_counter() - t0
    return tally


def situated_versions(r: dict[str, Any]) -> list[dict[str, Any]]:
    """An answerless *first* version only says nothing is known before the chain: no fact."""
    versions = list(r["versions"])
    if versions and not versions[0]["answer"]:
        versions = versions[1:]
    return versions


def situated_problem(r: dict[str, Any]) -> str | None:
    versions = situated_versions(r)
    if not versions:
        return "no version has an answer"
    if r.get("alt_timelines"):
        return "record has alternative timelines (answers disagree on the chain)"
    if any(not v["answer"] for v in versions):
        return "a later version has no answer"
    if any(len(v["answer"]) > 1 for v in versions):
        return "a version has several simultaneous answers (not single-valued)"
    if any(v["valid_from"] is None for v in versions):
        return "a version has no valid_from"
    starts = [parse_when(v["valid_from"]) for v in versions]
    if len(set(starts)) < len(starts):
        return "two versions start at the same time"
    return None


async def run_situated(kg: KG, path: Path, limit: int | None, rng: random.Random) -> Tally:
    tally = Tally("SituatedQA update chains (single-valued, supersede)")
    records = [json.loads(line) for line in path.open()][:limit]
    episodes: list[tuple[dict[str, Any], str]] = []
    scored: list[tuple[str, dict[str, Any]]] = []
    for i, r in enumerate(records):
        problem = situated_problem(r)
        if problem:
            tally.skipped[problem] += len(r["probes"])
            continue
        subject = f"q{i}: {r['key']}"
        answers = {name_key(v["answer"][0]) for v in situated_versions(r)}
        for p in r["probes"]:
            if {name_key(e) for e in p["expected"]} <= answers and len(p["expected"]) == 1:
                scored.append((subject, p))
            else:
                tally.skipped["probe expects an answer that is no version of the record"] += 1
        for v in situated_versions(r):
            fact = {
                "subject": subject,
                "predicate": ANSWER,
                "object": v["answer"][0],
                "valid_at": parse_when(v["valid_from"]).isoformat(),
            }
            episodes.append((fact, "situatedqa"))
    await ingest(kg, episodes, rng, tally)
    t0 = time.perf_counter()
    for subject, p in scored:
        expected = {name_key(e) for e in p["expected"]}
        got = await answer(kg, "situatedqa", subject, ANSWER, parse_when(p["as_of"]))
        tally.score(f"{subject!r} @{p['as_of']}", expected, got)
    tally.query_s = time.perf_counter() - t0
    return tally


async def ingest(
    kg: KG, episodes: list[tuple[dict[str, Any], str]], rng: random.Random, tally: Tally
) -> None:
    """One episode per fact, in a shuffled order: later versions often arrive first."""
    rng.shuffle(episodes)
    t0 = time.perf_counter()
    for fact, group in episodes:
        await kg.add_episode(
            source="facts",
            group_id=group,
            reference_time=INGEST_REF,
            facts=[fact],
            source_description="asof benchmark",
        )
    tally.ingest_s = time.perf_counter() - t0
    tally.episodes = tally.facts = len(episodes)


async def main(args: argparse.Namespace) -> None:
    temporal = Path(args.data) / "temporal"
    rng = random.Random(args.seed)
    async with bench_kg(args, ontology=ONTOLOGY) as kg:
        store = await describe(kg, args)
        tallies = [
            await run_yago(kg, temporal / "yago11k_asof_dev.jsonl", args.limit, rng),
            await run_situated(kg, temporal / "situatedqa_updates_dev.jsonl", args.limit, rng),
        ]
    print(f"# as-of accuracy (seed {args.seed}, shuffled arrival order) on {store}")
    for t in tallies:
        t.report()
    total = sum(t.probes for t in tallies)
    exact = sum(t.exact for t in tallies)
    print(f"\nALL: {exact}/{total} = {100.0 * exact / max(total, 1):.2f}% of well-formed probes")
    if exact != total:
        sys.exit(1)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", default=str(Path("../shared/data")))
    parser.add_argument("--limit", type=int, default=None, help="records per set (default all)")
    parser.add_argument("--seed", type=int, default=7)
    add_store_options(parser)
    return parser


if __name__ == "__main__":
    run_per_backend(parser(), main)
