"""Retrieval recall on LoCoMo through the real store: which dialogue turns come back.

    python benchmarks/locomo_recall.py [DATA_DIR] [--methods M ...] [--cross-encoder PATH]
        [--backend falkordb|neo4j|both]

On the store `--backend` names (benchmarks/bench_store.py; both: one run on each). The BM25
branch differs by backend: on Neo4j it is Lucene's own BM25 over the full-text index (its term
statistics span the whole database, every group), on FalkorDB kg rescores RediSearch's pool
with its own BM25 (kg.store.cypher.bm25, document frequencies of the group's graph).

Each conversation is a group. Its dialogue turns are ingested as message episodes, one
session each (`session_id`), reference time = session time (read as UTC), content
"Speaker: text" plus the image caption when there is one, embedded with the packaged
all-MiniLM-L6-v2. `--turns raw` (default) stores them unextracted (no LLM): an episode's
search key is the turn before it and the turn. `--turns extracted` extracts each through an
in-process scripted LLM that answers with the observation facts LoCoMo's authors drew from
that turn (subject the speaker, predicate OBSERVED), so the key also holds the turn's facts
(kg.search_keys): an upper bound for what an LLM extractor's facts would give.
Separately, in a group of their own, the conversation's observation facts
are ingested as structured facts (subject = speaker, fact = the observation), each episode
named by the turns it came from.

Recall@k as the LoCoMo paper defines it: the share of a question's gold evidence turns
(dia_ids) among the top k retrieved turns, averaged over questions that have evidence.
Results are printed for the development conversations (the first three: anything tuned was
tuned there), the held-out ones (the other three) and all six, with R@10 per category.

A method is a recipe name, optionally with modifiers: `@bm25=2` weights BM25's vote,
`+words` keeps question words in the full-text query (the engine before they were dropped),
`~neighbours=0.5` sets `neighbour_boost` (the turns next to the best hits), `~entities=0.5`
`entity_boost`, `~anchors=named|hits|both|any` `entity_anchors` and `~efacts=50`
`entity_facts` (the entity expansion, on --turns extracted),
`!joint=0.31` or `!cosine=0.49` abstains below that cutoff (`abstain_joint_below`,
`abstain_below`; a refused question retrieves nothing), and `facts:RECIPE` searches the
observation facts and maps them to their source turns. `--never-said` also asks questions
about things never said (locomo_data.foreign_questions) and prints the share refused.
Reference points (all 10 conversations, the paper's Table 3): DRAGON dialog-level
R@5/10/25/50 = 56.7 / 66.2 / 76.7 / 82.7; plain BM25 48.6 / 56.3 / 65.2 / 72.9. This data set
has 6 of the 10 conversations.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo_data as L
from bench_store import add_store_options, bench_kg, describe, run_per_backend

from kg import KG
from kg.ingest.embeddings import local_minilm
from kg.ingest.llm import Message, StructuredLLM
from kg.retrieval import RECIPES, Method, SearchConfig
from kg.retrieval.config import EntityAnchors

KS = (5, 10, 25, 50)
# Before this work: +words (question words kept) and RRF; now: question words dropped, scores.
DEFAULT_METHODS = [
    "episodes_bm25+words",
    "episodes_bm25",
    "episodes_cosine",
    "episodes_hybrid_rrf+words",
    "episodes_hybrid",
    "facts:facts_hybrid_rrf+words",
    "facts:facts_hybrid",
]
# Modifiers `~KEY=VALUE`: the SearchConfig field each sets, and how its value is read.
TILDE: dict[str, tuple[str, Any]] = {
    "neighbours": ("neighbour_boost", float),
    "entities": ("entity_boost", float),
    "anchors": ("entity_anchors", EntityAnchors),  # model_copy does not validate
    "efacts": ("entity_facts", int),
}
PAPER = {
    "paper: DRAGON (10 convs)": (56.7, 66.2, 76.7, 82.7),
    "paper: BM25 (10 convs)": (48.6, 56.3, 65.2, 72.9),
}


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def wide(method: str) -> SearchConfig:
    """The method's recipe with 50 results and a fused window wide enough to fill them."""
    recipe, _, abstain = method.removeprefix("facts:").partition("!")
    recipe, *tilde = recipe.split("~")
    recipe, words, _ = recipe.partition("+words")
    recipe, _, weight = recipe.partition("@bm25=")
    cfg = RECIPES[recipe]
    update: dict[str, Any] = {"window": 100}
    if weight:
        update["weights"] = {Method.bm25: float(weight)}
    if words:
        update["drop_question_words"] = False
    for mod in tilde:  # ~neighbours=0.5, ~entities=0.5, ~anchors=named, ~efacts=50
        key, _, value = mod.partition("=")
        field, kind = TILDE[key]
        update[field] = kind(value)
    if abstain:  # !joint=0.31 or !cosine=0.49
        signal, _, cut = abstain.partition("=")
        update[{"joint": "abstain_joint_below", "cosine": "abstain_below"}[signal]] = float(cut)
    for scope in ("facts", "episodes"):
        if getattr(cfg, scope) is not None:
            update[scope] = getattr(cfg, scope).model_copy(update={"limit": 50})
    return cfg.model_copy(update=update)


class ObservationLLM(StructuredLLM):
    """Extraction answered with the observation facts drawn from the turn (found by its
    text), each quoted by the turn's first words; resolution answered with no merges."""

    model = "locomo-observations"

    def __init__(self, data: dict[str, Any]) -> None:
        turns = {(e["conv"], e["dia_id"]): L.turn_text(e) for e in data["episodes"]}
        self.facts: dict[str, list[dict[str, Any]]] = {}
        for f in data["observation_facts"]:
            for d in f["source_dia_ids"]:
                text = turns.get((f["conv"], d))
                if text is not None:
                    self.facts.setdefault(text, []).append(f)

    async def _complete(
        self, messages: list[Message], schema: type[Any], name: str
    ) -> tuple[str, int, int]:
        if name != "Extraction":
            return "{}", 1, 1
        episode = messages[-1]["content"].split("EPISODE:\n", 1)[-1].strip()
        speaker, _, text = episode.partition(": ")
        quote = " ".join(text.split()[:6])
        facts = [
            {
                "subject": f["speaker"],
                "predicate": "OBSERVED",
                "object": f["fact"][:500],
                "fact": f["fact"],
                "quote": quote,
            }
            for f in self.facts.get(episode, [])
            if quote
        ]
        entities = [{"name": speaker, "type": "Person"}] if facts else []
        return json.dumps({"entities": entities, "facts": facts}), 1, 1


async def ingest(
    kg: KG, data: dict[str, Any], convs: list[str], extracted: bool = False
) -> dict[str, float]:
    t0 = time.perf_counter()
    turns = obs = 0
    for ep in data["episodes"]:
        if ep["conv"] not in convs:
            continue
        await kg.add_episode(
            source="message",
            content=L.turn_text(ep),
            reference_time=utc(ep["valid_at"]),
            group_id=ep["conv"],
            name=ep["dia_id"],
            session_id=f"{ep['conv']}:{ep['session']}",
            source_description=f"locomo {ep['conv']} {ep['dia_id']}",
            extract=extracted,
        )
        turns += 1
    t_turns = time.perf_counter() - t0
    for i, f in enumerate(data["observation_facts"]):
        if f["conv"] not in convs:
            continue
        await kg.add_episode(
            source="facts",
            reference_time=utc(f["valid_at"]),
            group_id=f"{f['conv']}-obs",
            name=",".join(f["source_dia_ids"]),
            source_description=f"locomo observation {i}",
            facts=[
                {
                    "subject": f["speaker"],
                    "predicate": "OBSERVED",
                    "object": f["fact"][:500],
                    "fact": f["fact"],
                }
            ],
        )
        obs += 1
    return {
        "turns": turns,
        "observations": obs,
        "turn_seconds": t_turns,
        "obs_seconds": time.perf_counter() - t0 - t_turns,
    }


async def retrieve(kg: KG, method: str, q: dict[str, Any]) -> list[str]:
    """dia_ids of the top 50 turns, best first."""
    if method.startswith("facts:"):
        group = f"{q['conv']}-obs"
        r = await kg.search(q["question"], group_id=group, config=wide(method))
        episodes = await kg.store.episodes(group, [h.fact.edge.episodes[0] for h in r.facts])
        names = {e.uuid: e.name for e in episodes}
        ids = [d for h in r.facts for d in names[h.fact.edge.episodes[0]].split(",")]
        return list(dict.fromkeys(ids))
    r = await kg.search(q["question"], group_id=q["conv"], config=wide(method))
    return [h.episode.name for h in r.episodes]


def report(methods: list[str], rows: list[dict[str, Any]], parts: dict[str, list[str]]) -> None:
    """Recall@k per method and split, then R@10 per category and split."""
    width = max(32, *(len(m) + 2 for m in methods))
    names = [p for p in ("dev", "held-out", "all") if any(r["conv"] in parts[p] for r in rows)]
    for part in names:
        qs = [r for r in rows if r["conv"] in parts[part] and r["category"]]
        if not qs:
            continue
        present = sorted({r["conv"] for r in qs})
        print(f"\n{part} ({', '.join(present)}): {len(qs)} questions")
        print(
            f"{'method':<{width}}"
            + "".join(f"{'R@' + str(k):>8}" for k in KS)
            + f"{'p50 ms':>9}{'p95 ms':>9}"
        )
        for m in methods:
            rec = [100 * statistics.mean(r["recall"][m][i] for r in qs) for i in range(len(KS))]
            lat = [r["ms"][m] for r in qs]
            print(
                f"{m:<{width}}"
                + "".join(f"{v:>8.1f}" for v in rec)
                + f"{pct(lat, 50):>9.1f}{pct(lat, 95):>9.1f}"
            )
        if part == "all":
            for name, ref in PAPER.items():
                print(f"{name:<{width}}" + "".join(f"{v:>8.1f}" for v in ref))
    refusals(methods, rows, parts, names, width)
    for part in names:
        qs = [r for r in rows if r["conv"] in parts[part] and r["category"]]
        cats = sorted({r["category"] for r in qs})
        print(f"\nR@10 by category, {part}:")
        print(f"{'method':<{width}}" + "".join(f"{L.CATEGORIES[c]:>13}" for c in cats))
        for m in methods:
            cells = [
                100 * statistics.mean(r["recall"][m][1] for r in qs if r["category"] == c)
                for c in cats
            ]
            print(f"{m:<{width}}" + "".join(f"{v:>13.1f}" for v in cells))
        counts = [f"{L.CATEGORIES[c]} {sum(1 for r in qs if r['category'] == c)}" for c in cats]
        print("questions: " + ", ".join(counts))


def refusals(
    methods: list[str],
    rows: list[dict[str, Any]],
    parts: dict[str, list[str]],
    names: list[str],
    width: int,
) -> None:
    """Share of questions each method left empty (abstained), by kind: answerable (LoCoMo
    categories 1-4), adversarial (5) and never said (category 0: another conversation's
    questions, its speakers renamed, asked with --never-said)."""
    if not any("!" in m for m in methods):
        return
    kinds = {"answerable": (1, 2, 3, 4), "adversarial": (5,), "never said": (0,)}
    for part in names:
        qs = [r for r in rows if r["conv"] in parts[part]]
        print(f"\nrefused, {part}:")
        print(f"{'method':<{width}}" + "".join(f"{k:>13}" for k in kinds))
        for m in methods:
            cells = []
            for cats in kinds.values():
                mine = [r for r in qs if r["category"] in cats]
                share = 100 * statistics.mean(r["refused"][m] for r in mine) if mine else 0.0
                cells.append(f"{share:>8.1f}/{len(mine):<4}")
            print(f"{m:<{width}}" + "".join(cells))


async def main(args: argparse.Namespace) -> None:
    data = L.load(args.data)
    parts = L.split(data)
    convs = L.conversations(data)[args.skip :]
    if args.conversations:
        convs = convs[: args.conversations]
    queries = L.questions(data, convs)
    if args.never_said:
        pairs = L.foreign_pairs(data)
        queries += [
            {**q, "category": 0, "gold_dia_ids": []}
            for conv in convs
            for q in L.foreign_questions(data, conv, pairs[conv])
        ]
    methods = list(args.methods)
    cross = None
    if args.cross_encoder:
        from kg.retrieval import SentenceTransformerCrossEncoder

        cross = SentenceTransformerCrossEncoder(args.cross_encoder)
        methods.append("episodes_hybrid_cross_encoder")
    for m in methods:
        wide(m)  # an unknown recipe fails before minutes of ingest

    rows: list[dict[str, Any]] = []
    llm = ObservationLLM(data) if args.turns == "extracted" else None
    async with bench_kg(args, embedder=local_minilm(), cross_encoder=cross, llm=llm) as kg:
        print(f"store: {await describe(kg, args)}, turns {args.turns}", flush=True)
        stats = await ingest(kg, data, convs, extracted=llm is not None)
        print(
            f"conversations: {len(convs)}, turns: {stats['turns']} "
            f"({stats['turn_seconds']:.0f} s), observation facts: {stats['observations']} "
            f"({stats['obs_seconds']:.0f} s), questions with evidence: {len(queries)}",
            flush=True,
        )
        for n, q in enumerate(queries, start=1):
            if n % 100 == 0:
                print(f"{n} questions", file=sys.stderr, flush=True)
            gold = set(q["gold_dia_ids"])
            row: dict[str, Any] = {
                "conv": q["conv"],
                "category": q["category"],
                "recall": {},
                "ms": {},
                "refused": {},
            }
            for m in methods:
                t0 = time.perf_counter()
                got = await retrieve(kg, m, q)
                row["ms"][m] = (time.perf_counter() - t0) * 1000
                row["refused"][m] = not got
                row["recall"][m] = [len(gold & set(got[:k])) / max(len(gold), 1) for k in KS]
            rows.append(row)
    report(methods, rows, parts)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="?", default=str(L.default_data_dir()))
    ap.add_argument("--conversations", type=int, default=0, help="0 = all")
    ap.add_argument("--skip", type=int, default=0, help="start after this many conversations")
    ap.add_argument(
        "--methods",
        nargs="*",
        default=DEFAULT_METHODS,
        help="recipes, with @bm25=W, +words, ~neighbours=B, ~entities=B, ~anchors=A, "
        "~efacts=N, or facts:RECIPE",
    )
    ap.add_argument("--cross-encoder", default=None, help="sentence-transformers model path")
    ap.add_argument(
        "--never-said",
        action="store_true",
        help="also ask each conversation another one's questions, speakers renamed "
        "(never said here), and report the share each !joint= / !cosine= method "
        "refuses",
    )
    ap.add_argument(
        "--turns",
        choices=("raw", "extracted"),
        default="raw",
        help="store turns unextracted, or extract the observation facts",
    )
    add_store_options(ap)
    return ap


if __name__ == "__main__":
    run_per_backend(parser(), main)
