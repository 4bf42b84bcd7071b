"""Extraction quality with no judge model: proposed facts against LoCoMo's observation facts.

    python benchmarks/extraction_quality.py run [DATA_DIR] --model smollm2 --out RUN.jsonl
        [--dev 40] [--held-out 100] [--systems kg,graphiti] [--budget S] [--max-tokens 320]
    python benchmarks/extraction_quality.py score RUN.jsonl [RUN2.jsonl ...] [--data DATA_DIR]

LoCoMo's authors wrote, for each conversation, short "observation" facts about the speakers,
each citing the turns (dia_ids) it was drawn from: what a reader takes from those turns.
`run` sends turns that have at least one observation through kg (`KG.add_episode`, the real
path: the model's prompt profile, vetting, resolution, the write) and through graphiti-core
0.31.2 (`Graphiti.add_episode`), at the same time, each on its own llama-cpp-python server
with the same model and settings (one llama.cpp thread each), and records per turn what each
proposed and kept, its LLM calls, tokens and seconds. For kg the model's raw reply is kept
too, so vetting can be replayed at any quote threshold without calling the model again.

`score` compares each kept fact with the observations of its own turn (matched by dia_id):
a fact matches an observation when its normalised subject names the observation's speaker
and enough of its content words are in the observation (share of the fact's content words,
stemmed, names and function words left out). Precision: kept facts that match one of their
turn's observations. Recall: observations matched by at least one kept fact. Facts per
turn: kept, and kept-and-matching ("correct").

Turns: the conversations sorted by id, the first three are dev, the other three held out
(as in benchmarks/locomo_data.py); from each side, `--dev` / `--held-out` turns with
observations, drawn with a fixed seed, each side in conversation order, the two mixed
evenly (a run cut by `--budget` keeps both in proportion; every system gets the same order).
Thresholds are chosen on dev only and the held-out figures are reported:
- the matcher's (at least two shared content words, or all of a one-word fact, and then a
  share of the fact's words): the one with the largest gap between how often a dev fact
  matches its own turn's observations and how often it matches those of a *different* turn
  of the same speaker (drawn with a fixed seed, as many as its own turn has), the latter at
  most 5%: the matcher's false-match rate against a null; on a tie, the stricter;
- kg's quote-alignment threshold (kg.ingest.alignment): the one that keeps the most
  matching dev facts with dev precision at least 0.8 (the lowest such, on a tie).

Data stay in ../shared/data (CC BY-NC, evaluation only); records and logs go where `--out`
says (never the repo). Needs graphiti-core (dev extra) and the `llm-local` extra, or
KG_LOCAL_LLM_PYTHON naming a venv with it (see tests/local_llm.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.locomo_data import DEV_CONVERSATIONS, load, turn_text
from kg.ingest.alignment import STOPWORDS, fold, stem, words
from kg.ingest.extraction import Guards, vet
from kg.ingest.profiles import profile_for
from kg.schemas.episode import Episode
from kg.schemas.extraction import CompactExtraction, Extraction
from kg.schemas.ontology import DEFAULT_ONTOLOGY

SEED = 29
MODEL_NAMES = {"smollm2": "smollm2-135m-instruct", "gemma3": "gemma-3-270m"}  # tests.local_llm
NULL_RATE = 0.05  # the matcher's false-match rate allowed against other turns' observations
PRECISION_FLOOR = 0.8
GRID = [round(0.05 * i, 2) for i in range(21)]


# -- turns ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    split: str
    conv: str
    dia_id: str
    speaker: str
    content: str
    valid_at: datetime
    index: int  # in its conversation: reference times keep the turns' order


def observations(data: dict[str, Any]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(conv, dia_id) -> the observation facts that cite that turn."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for o in data["observation_facts"]:
        for dia in o["source_dia_ids"]:
            by[(o["conv"], dia)].append(o)
    return by


def select(data: dict[str, Any], n_dev: int, n_held: int) -> list[Turn]:
    obs = observations(data)
    convs = sorted({e["conv"] for e in data["episodes"]})
    turns: list[Turn] = []
    for split, names, n in (
        ("dev", convs[:DEV_CONVERSATIONS], n_dev),
        ("held-out", convs[DEV_CONVERSATIONS:], n_held),
    ):
        pool: list[Turn] = []
        for conv in names:
            eps = [e for e in data["episodes"] if e["conv"] == conv]
            pool += [
                Turn(
                    split,
                    conv,
                    e["dia_id"],
                    e["speaker"],
                    turn_text(e),
                    datetime.fromisoformat(e["valid_at"]).replace(tzinfo=UTC),
                    i,
                )
                for i, e in enumerate(eps)
                if (conv, e["dia_id"]) in obs
            ]
        picked = set(random.Random(f"{SEED}-{split}").sample(range(len(pool)), min(n, len(pool))))
        turns += [t for i, t in enumerate(pool) if i in picked]
    return interleave(turns)


def interleave(turns: list[Turn]) -> list[Turn]:
    """Dev and held-out turns mixed evenly, each in its own order: a run its budget cuts
    still has both in proportion, and every system meets the turns in the same order."""
    sides = [[t for t in turns if t.split == s] for s in ("dev", "held-out")]
    key = {id(t): (i + 0.5) / len(side) for side in sides for i, t in enumerate(side)}
    return sorted(turns, key=lambda t: (key[id(t)], t.split))


def when(t: Turn) -> datetime:
    return t.valid_at + timedelta(seconds=t.index)


# -- the matcher ----------------------------------------------------------------------------


def content(text: str, names: Iterable[str]) -> set[str]:
    """Stemmed content words: no function words, no speaker names, no possessive 's."""
    skip = {fold(n) for n in names}
    out = set()
    for w, _, _ in words(text):
        w = w.removesuffix("'s")
        if w in STOPWORDS or w in skip or (w.isdigit() and len(w) != 4):  # years count
            continue
        out.add(stem(w))
    return out


def subject_names(subject: str, speaker: str) -> bool:
    """The fact's normalised subject names the observation's speaker (first name)."""
    first = fold(speaker).split()[0]
    return first in {w.removesuffix("'s") for w, _, _ in words(subject)}


def overlap(fact: dict[str, Any], obs: dict[str, Any], names: Sequence[str]) -> float:
    if not subject_names(str(fact.get("subject", "")), obs["speaker"]):
        return 0.0
    mine = content(str(fact.get("fact", "")), names)
    shared = len(mine & content(obs["fact"], names))
    if not mine or shared < min(2, len(mine)):  # one shared word is not the same fact
        return 0.0
    return shared / len(mine)


def best_overlap(
    fact: dict[str, Any], obs: Sequence[dict[str, Any]], names: Sequence[str]
) -> float:
    return max((overlap(fact, o, names) for o in obs), default=0.0)


# -- run ------------------------------------------------------------------------------------


def record(path: Path, row: dict[str, Any]) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(row, ensure_ascii=False) + "\n")


async def run_kg(args: argparse.Namespace, url: str, turns: list[Turn], out: Path) -> None:
    from benchmarks.graphiti_llm import Counts, counting_client
    from kg import KG, local_minilm
    from kg.errors import ExtractionError
    from kg.ingest import content_hash
    from kg.ingest.llm import OpenAILLM

    replies: list[Extraction] = []

    class Recording(OpenAILLM):
        async def structured(self, messages: Any, schema: Any, **kw: Any) -> Any:
            value, calls = await super().structured(messages, schema, **kw)
            if kw.get("purpose") == "extract":
                from kg.ingest.profiles import as_extraction

                replies.append(as_extraction(value))
            return value, calls

    counts = Counts()
    llm = Recording(
        args.model_name,
        base_url=url,
        max_concurrency=1,
        max_retries=2,
        timeout=args.timeout,
        max_tokens=args.max_tokens,
        http_client=counting_client(counts, args.timeout),
    )
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kg-eq-", dir=args.home) as home:
        async with await KG.open(home=home, llm=llm, embedder=local_minilm()) as kg:
            done: set[Turn] = set()
            for t in turns:
                if time.perf_counter() - t_start > args.budget:
                    break
                done.add(t)
                episode = Episode(
                    source="message",
                    group_id=t.conv,
                    content=t.content,
                    reference_time=when(t),
                    source_description=f"locomo {t.dia_id}",
                )
                c0, p0, g0, n0 = (
                    counts.calls,
                    counts.prompt_tokens,
                    counts.completion_tokens,
                    len(replies),
                )
                t0 = time.perf_counter()
                outcome, error = "ingested", None
                try:
                    r = await kg.add_episode(episode)
                    written = (
                        r.summary.facts_added + r.summary.facts_reinforced + r.summary.facts_merged
                    )
                    dropped = r.summary.facts_dropped
                except ExtractionError as exc:
                    outcome, error, written, dropped = "failed", str(exc)[:300], 0, {}
                except Exception as exc:  # a crash: what the run also looks for
                    outcome, error, written, dropped = (
                        "crashed",
                        f"{type(exc).__name__}: {exc}",
                        0,
                        {},
                    )
                node = await kg.store.episode_by_hash(t.conv, content_hash(episode))
                kept = json.loads(node.extraction or "[]") if node and node.extraction else []
                raw = replies[n0:]
                record(
                    out,
                    {
                        "system": "kg",
                        "model": args.model,
                        "split": t.split,
                        "conv": t.conv,
                        "dia_id": t.dia_id,
                        "outcome": outcome,
                        "error": error,
                        "status": node.status.value if node else None,
                        "proposed": [f.model_dump() for f in raw[-1].facts] if raw else [],
                        "kept": [
                            {
                                "subject": f["subject"],
                                "predicate": f["predicate"],
                                "object": f["object"],
                                "fact": f["fact"],
                            }
                            for f in kept
                        ],
                        "written": written,
                        "dropped": dropped,
                        "calls": counts.calls - c0,
                        "prompt_tokens": counts.prompt_tokens - p0,
                        "completion_tokens": counts.completion_tokens - g0,
                        "seconds": round(time.perf_counter() - t0, 2),
                        "quote_threshold": Guards().quote_threshold,
                    },
                )
                if args.progress:
                    print(
                        f"kg {t.split} {t.conv} {t.dia_id}: {outcome}, {len(kept)} kept, "
                        f"{time.perf_counter() - t0:.0f} s",
                        file=sys.stderr,
                    )
            versions = [
                v
                for conv in {t.conv for t in done}
                for v in await kg.history(group_id=conv, limit=100_000)
            ]
            ingested = set()
            for conv in {t.conv for t in turns if t in done}:  # a group not reached has no graph
                rows = await kg.store.raw_query(
                    conv, "MATCH (e:Episodic {status: 'ingested'}) RETURN e.uuid AS u"
                )
                ingested |= {r["u"] for r in rows}
            orphans = sum(1 for v in versions if not set(v.edge.episodes) <= ingested)
            record(
                out,
                {
                    "system": "kg",
                    "model": args.model,
                    "summary": True,
                    "half_written": orphans,
                    "versions": len(versions),
                },
            )


async def run_graphiti(args: argparse.Namespace, url: str, turns: list[Turn], out: Path) -> None:
    from graphiti_core.nodes import EpisodeType

    from benchmarks.graphiti_llm import Counts, graphiti
    from kg import KG, local_minilm
    from kg.graphiti_embedder import GraphitiEmbedder
    from kg.store.falkordb import FalkorDBStore

    counts = Counts()
    order = turns
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="graphiti-eq-", dir=args.home) as home:
        async with await KG.open(home=home, embedder=None) as kg:  # its FalkorDB, for Graphiti
            store = kg.store
            assert isinstance(store, FalkorDBStore)
            g = graphiti(
                store.client,
                "graphiti_eq",
                base_url=url,
                model=args.model_name,
                embedder=GraphitiEmbedder(local_minilm()),
                counts=counts,
                timeout=args.timeout,
                max_tokens=args.max_tokens,
                json_object=True,
            )
            await g.build_indices_and_constraints()
            for t in order:
                left = args.budget - (time.perf_counter() - t_start)
                if left <= 0:
                    break
                c0, p0, g0 = counts.calls, counts.prompt_tokens, counts.completion_tokens
                t0 = time.perf_counter()
                kept: list[dict[str, Any]] = []
                outcome, error = "ingested", None
                try:
                    res = await asyncio.wait_for(
                        g.add_episode(
                            name=t.dia_id,
                            episode_body=t.content,
                            source_description="locomo",
                            reference_time=when(t),
                            source=EpisodeType.message,
                            group_id=t.conv.replace("-", "_"),
                        ),
                        left,
                    )
                    names = {n.uuid: n.name for n in res.nodes}
                    kept = [
                        {
                            "subject": names.get(e.source_node_uuid, ""),
                            "predicate": e.name,
                            "object": names.get(e.target_node_uuid, ""),
                            "fact": e.fact,
                        }
                        for e in res.edges
                    ]
                except TimeoutError:
                    outcome, error = "cut", "budget"
                except Exception as exc:
                    outcome, error = "raised", f"{type(exc).__name__}: {str(exc)[:200]}"
                record(
                    out,
                    {
                        "system": "graphiti",
                        "model": args.model,
                        "split": t.split,
                        "conv": t.conv,
                        "dia_id": t.dia_id,
                        "outcome": outcome,
                        "error": error,
                        "kept": kept,
                        "calls": counts.calls - c0,
                        "prompt_tokens": counts.prompt_tokens - p0,
                        "completion_tokens": counts.completion_tokens - g0,
                        "seconds": round(time.perf_counter() - t0, 2),
                    },
                )
                if args.progress:
                    print(
                        f"graphiti {t.split} {t.conv} {t.dia_id}: {outcome}, {len(kept)} "
                        f"kept, {time.perf_counter() - t0:.0f} s",
                        file=sys.stderr,
                    )


def run(args: argparse.Namespace) -> None:
    from tests.local_llm import MODELS, LocalLLMServer

    data = load(args.data)
    turns = select(data, args.dev, args.held_out)
    args.model_name = MODELS[args.model][0]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    args.home = str(out.parent)
    systems = args.systems.split(",")
    print(
        f"# {args.model}: {len(turns)} turns ({sum(t.split == 'dev' for t in turns)} dev), "
        f"systems {systems}, records -> {out}",
        flush=True,
    )
    with contextlib.ExitStack() as stack:
        urls = []
        for name in systems:
            log = out.parent / f"llama-{args.model}-{name}.log"
            server = LocalLLMServer(
                model=args.model,
                threads=args.threads,
                nice=args.nice,
                n_ctx=args.n_ctx,
                log_path=log,
                verbose=True,
            )
            urls.append(stack.enter_context(server).base_url)
        jobs = {"kg": run_kg, "graphiti": run_graphiti}

        async def both() -> None:
            await asyncio.gather(
                *(jobs[n](args, u, turns, out) for n, u in zip(systems, urls, strict=True))
            )

        asyncio.run(both())


# -- score ----------------------------------------------------------------------------------


def load_rows(paths: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    for p in paths:
        rows += [json.loads(line) for line in Path(p).read_text().splitlines() if line.strip()]
    return rows


def revet(row: dict[str, Any], turn: Turn, threshold: float) -> list[dict[str, Any]]:
    """kg's vetting replayed on the recorded reply at another quote threshold."""
    if row["outcome"] != "ingested":
        return []
    extraction = Extraction.model_validate({"facts": row["proposed"]})
    if profile_for(MODEL_NAMES.get(row["model"], row["model"])).schema is CompactExtraction:
        extraction = CompactExtraction.model_validate({"facts": row["proposed"]}).full()
    episode = Episode(
        source="message", group_id=turn.conv, content=turn.content, reference_time=when(turn)
    )
    kept, _, _ = vet(extraction, episode, DEFAULT_ONTOLOGY, Guards(quote_threshold=threshold))
    return unique([{"subject": f.subject, "fact": f.fact} for f in kept])


def unique(facts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A fact said twice in one turn is one fact (kg's resolution merges such twins)."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for f in facts:
        seen.setdefault((fold(str(f.get("subject"))), fold(str(f.get("fact")))), f)
    return list(seen.values())


def own_rate(
    facts: list[tuple[dict[str, Any], Turn]], obs: Any, speakers: Any, theta: float
) -> float:
    """How often a fact matches an observation of its own turn."""
    hits = [best_overlap(f, obs[(t.conv, t.dia_id)], speakers[t.conv]) >= theta for f, t in facts]
    return sum(hits) / len(hits) if hits else 0.0


def null_rate(
    facts: list[tuple[dict[str, Any], Turn]], obs: Any, speakers: Any, theta: float
) -> float:
    """How often a fact matches the observations of another turn of the same speaker."""
    rng = random.Random(SEED)
    by_speaker: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for (conv, dia), os_ in obs.items():
        for o in os_:
            by_speaker[(conv, o["speaker"])].append((dia, o))
    hits = n = 0
    for fact, turn in facts:
        own = obs[(turn.conv, turn.dia_id)]
        for o in own:
            others = [x for d, x in by_speaker[(turn.conv, o["speaker"])] if d != turn.dia_id]
            if not others:
                continue
            pick = rng.sample(others, min(len(own), len(others)))
            n += 1
            hits += best_overlap(fact, pick, speakers[turn.conv]) >= theta
            break
    return hits / n if n else 0.0


def score_set(
    rows: list[tuple[list[dict[str, Any]], Turn]], obs: Any, speakers: Any, theta: float
) -> dict[str, float]:
    kept = correct = matched_obs = total_obs = 0
    for facts, turn in rows:
        own = obs[(turn.conv, turn.dia_id)]
        total_obs += len(own)
        kept += len(facts)
        correct += sum(best_overlap(f, own, speakers[turn.conv]) >= theta for f in facts)
        matched_obs += sum(
            any(overlap(f, o, speakers[turn.conv]) >= theta for f in facts) for o in own
        )
    n = len(rows)
    return {
        "turns": n,
        "kept": kept,
        "correct": correct,
        "precision": correct / kept if kept else float("nan"),
        "recall": matched_obs / total_obs if total_obs else float("nan"),
        "kept_per_turn": kept / n if n else 0.0,
        "correct_per_turn": correct / n if n else 0.0,
    }


def gap(rates: dict[float, tuple[float, float]], theta: float) -> float:
    own, other = rates.get(theta, (0.0, 0.0))
    return own - other


def spread(values: list[float]) -> str:
    if not values:
        return "n/a"
    mean, p50 = statistics.mean(values), statistics.median(values)
    return f"{mean:.2f} (p50 {p50:.0f}, max {max(values):.0f})"


def score(args: argparse.Namespace) -> None:
    data = load(args.data)
    obs = observations(data)
    speakers = {
        c: sorted({e["speaker"] for e in data["episodes"] if e["conv"] == c})
        for c in {e["conv"] for e in data["episodes"]}
    }
    rows = [r for r in load_rows(args.records) if not r.get("summary")]
    every = {(t.conv, t.dia_id): t for t in select(data, 10_000, 10_000)}
    summaries = [r for r in load_rows(args.records) if r.get("summary")]
    models = sorted({r["model"] for r in rows})
    print(f"records: {len(rows)} turn rows from {', '.join(args.records)}")
    # 1. the matcher's threshold, on dev facts of every system and model
    dev_facts = [
        (f, every[(r["conv"], r["dia_id"])])
        for r in rows
        if r["split"] == "dev"
        for f in (
            revet(r, every[(r["conv"], r["dia_id"])], 0.0) if r["system"] == "kg" else r["kept"]
        )
    ]
    grid = [th for th in GRID if 0.2 <= th <= 0.9]
    rates = {
        th: (own_rate(dev_facts, obs, speakers, th), null_rate(dev_facts, obs, speakers, th))
        for th in grid
    }
    fit = [th for th in grid if rates[th][1] <= NULL_RATE]
    theta = args.matcher or max(fit or [1.0], key=lambda th: (gap(rates, th), th))
    print(
        f"matcher threshold: {theta} (dev facts: {len(dev_facts)}; the threshold with the "
        f"largest gap between matching the fact's own turn and another turn of the same "
        f"speaker, the latter at most {NULL_RATE:.0%}; own / other by threshold: "
        + ", ".join(f"{th}: {o:.2f}/{n:.2f}" for th, (o, n) in rates.items())
        + ")"
    )
    # 2. kg's quote threshold, on the dev turns of every model at once (one default for kg)
    dev = [
        (r, every[(r["conv"], r["dia_id"])])
        for r in rows
        if r["system"] == "kg" and r["split"] == "dev"
    ]
    sweep = {
        q: score_set([(revet(r, t, q), t) for r, t in dev], obs, speakers, theta) for q in GRID
    }
    print(f"\n## kg's quote threshold on dev ({len(dev)} turns, {', '.join(models)})")
    print("| quote threshold | kept | correct | precision | recall |\n|---|---|---|---|---|")
    for q, s in sweep.items():
        if q in (0.0, 0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9, 1.0):
            print(
                f"| {q} | {s['kept']} | {s['correct']} | {s['precision']:.2f} | {s['recall']:.2f} |"
            )
    ok = [q for q, s in sweep.items() if s["kept"] and s["precision"] >= PRECISION_FLOOR]
    if args.quote is not None:
        q_best, why = args.quote, "given"
    elif ok:
        q_best = max(ok, key=lambda q: (sweep[q]["correct"], -q))
        why = f"the most correct facts at precision >= {PRECISION_FLOOR}, the lowest on a tie"
    else:  # the floor is out of reach: the most precise, then the most correct
        kept = [q for q, s in sweep.items() if s["kept"]] or [1.0]
        q_best = max(kept, key=lambda q: (sweep[q]["precision"], sweep[q]["correct"], -q))
        why = f"no threshold reached precision {PRECISION_FLOOR}: the most precise, lowest on a tie"
    print(f"chosen on dev: {q_best} ({why})")
    table = []
    for model in models:
        mine = [r for r in rows if r["model"] == model]
        kg_rows = {(r["conv"], r["dia_id"]): r for r in mine if r["system"] == "kg"}
        g_rows = {(r["conv"], r["dia_id"]): r for r in mine if r["system"] == "graphiti"}
        for split in ("dev", "held-out"):
            in_split = [k for k in kg_rows if kg_rows[k]["split"] == split]
            both = [k for k in in_split if k in g_rows]
            sides = {
                f"kg (quote threshold {q_best})": [
                    (revet(kg_rows[k], every[k], q_best), every[k]) for k in in_split
                ],
                "kg (exact quotes, as before)": [
                    (revet(kg_rows[k], every[k], 1.0), every[k]) for k in in_split
                ],
                "kg, on the turns Graphiti finished": [
                    (revet(kg_rows[k], every[k], q_best), every[k]) for k in both
                ],
                "graphiti-core": [
                    (unique(g_rows[k]["kept"]), every[k])
                    for k in g_rows
                    if g_rows[k]["split"] == split
                ],
            }
            for name, side in sides.items():
                if not side:
                    continue
                s = score_set(side, obs, speakers, theta)
                src = g_rows if name.startswith("graphiti") else kg_rows
                keys = [(t.conv, t.dia_id) for _, t in side]
                outcomes = defaultdict(int)
                for k in keys:
                    outcomes[src[k]["outcome"]] += 1
                table.append(
                    (
                        model,
                        split,
                        name,
                        s,
                        outcomes,
                        [float(src[k]["calls"]) for k in keys],
                        [
                            float(src[k]["prompt_tokens"] + src[k]["completion_tokens"])
                            for k in keys
                        ],
                        [src[k]["seconds"] for k in keys],
                    )
                )
    print(f"\n## extraction quality (matcher threshold {theta})")
    print(
        "| model | split | system | turns | outcomes | facts kept | correct | precision | recall "
        "| kept / turn | correct / turn | calls / episode | tokens / episode | s / episode |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model, split, name, s, outcomes, calls, tokens, secs in table:
        oc = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
        print(
            f"| {model} | {split} | {name} | {s['turns']} | {oc} | {s['kept']} | {s['correct']} "
            f"| {s['precision']:.2f} | {s['recall']:.2f} | {s['kept_per_turn']:.2f} "
            f"| {s['correct_per_turn']:.2f} | {spread(calls)} | {spread(tokens)} | {spread(secs)} |"
        )
    for s in summaries:
        print(
            f"{s['model']} {s['system']}: half-written (versions citing a non-ingested "
            f"episode): {s['half_written']} of {s['versions']} versions"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="call the models; append a record a turn to --out")
    r.add_argument("data", nargs="?", default=str(Path("../shared/data")))
    r.add_argument("--model", choices=["smollm2", "gemma3"], default="smollm2")
    r.add_argument("--out", required=True, help="JSON Lines of records (outside the repo)")
    r.add_argument("--dev", type=int, default=40)
    r.add_argument("--held-out", type=int, default=100)
    r.add_argument("--systems", default="kg,graphiti")
    r.add_argument("--budget", type=float, default=6000.0, help="seconds per system")
    r.add_argument("--max-tokens", type=int, default=320)
    r.add_argument("--timeout", type=float, default=300.0)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--n-ctx", type=int, default=4096)
    r.add_argument("--nice", type=int, default=10)
    r.add_argument("--progress", action="store_true")
    s = sub.add_parser("score", help="score records; choose thresholds on dev")
    s.add_argument("records", nargs="+")
    s.add_argument("--data", default=str(Path("../shared/data")))
    s.add_argument("--matcher", type=float, default=None, help="fix the matcher threshold")
    s.add_argument("--quote", type=float, default=None, help="fix kg's quote threshold")
    args = parser.parse_args()
    if args.command == "run":
        run(args)
    else:
        score(args)


if __name__ == "__main__":
    main()
