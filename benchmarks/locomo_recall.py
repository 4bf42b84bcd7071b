"""Retrieval recall on LoCoMo: which dialogue turns come back for each question.

    python benchmarks/locomo_recall.py [DATA_DIR] [--conversations N] [--cross-encoder PATH]

Each conversation is a group. Its dialogue turns are ingested as message episodes, stored
unextracted (no LLM here), reference time = session time (read as UTC), content
"Speaker: text" plus the image caption when there is one, embedded with the packaged
all-MiniLM-L6-v2. Separately, in a group of their own, the conversation's observation facts
are ingested as structured facts (subject = speaker, fact = the observation), each episode
named by the turns it came from.

Recall@k as the LoCoMo paper defines it: the share of a question's gold evidence turns
(dia_ids) among the top k retrieved turns, averaged over questions that have evidence.
Methods: BM25 alone, cosine alone, RRF hybrid, hybrid + MMR, hybrid + cross-encoder (only
with --cross-encoder: no trained cross-encoder can be downloaded here), and the observation
facts' hybrid search mapped back to their source turns. Latency p50/p95 per query is printed
for each. Reference points (all 10 conversations, the paper's Table 3 and the data README):
DRAGON dialog-level R@5/10/25/50 = 56.7 / 66.2 / 76.7 / 82.7; plain BM25 48.6 / 56.3 / 65.2 /
72.9. This data set has 6 of the 10 conversations.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kg import KG
from kg.ingest.embeddings import local_minilm
from kg.retrieval import RECIPES, Method, SearchConfig

KS = (5, 10, 25, 50)
FACTS_RECIPE = "facts_hybrid_rrf"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def wide(recipe: str) -> SearchConfig:
    """The recipe with 50 results and a fused window wide enough to fill them.

    'episodes_hybrid_rrf@bm25=2' is the recipe with BM25's RRF vote weighted 2."""
    recipe, _, weight = recipe.partition("@bm25=")
    cfg = RECIPES[recipe]
    if weight:
        cfg = cfg.model_copy(update={"weights": {Method.bm25: float(weight)}})
    scopes = {s: getattr(cfg, s).model_copy(update={"limit": 50})
              for s in ("facts", "episodes") if getattr(cfg, s) is not None}  # fmt: skip
    return cfg.model_copy(update={"window": 100, **scopes})


def turn_text(ep: dict[str, Any]) -> str:
    """A dialogue turn as episode content: 'Speaker: text', plus the image caption if any."""
    text = f"{ep['speaker']}: {ep['text']}"
    if ep.get("image_caption"):
        text += f" [shares an image: {ep['image_caption']}]"
    return text


async def ingest(kg: KG, data: dict[str, Any], convs: list[str]) -> dict[str, float]:
    t0 = time.perf_counter()
    turns = obs = 0
    for ep in data["episodes"]:
        if ep["conv"] not in convs:
            continue
        await kg.add_episode(
            source="message", content=turn_text(ep), reference_time=utc(ep["valid_at"]),
            group_id=ep["conv"], name=ep["dia_id"],
            source_description=f"locomo {ep['conv']} {ep['dia_id']}", extract=False,
        )  # fmt: skip
        turns += 1
    t_turns = time.perf_counter() - t0
    for i, f in enumerate(data["observation_facts"]):
        if f["conv"] not in convs:
            continue
        await kg.add_episode(
            source="facts", reference_time=utc(f["valid_at"]), group_id=f"{f['conv']}-obs",
            name=",".join(f["source_dia_ids"]), source_description=f"locomo observation {i}",
            facts=[{"subject": f["speaker"], "predicate": "OBSERVED", "object": f["fact"][:500],
                    "fact": f["fact"]}],
        )  # fmt: skip
        obs += 1
    return {"turns": turns, "observations": obs, "turn_seconds": t_turns,
            "obs_seconds": time.perf_counter() - t0 - t_turns}  # fmt: skip


async def retrieve(kg: KG, method: str, q: dict[str, Any]) -> list[str]:
    """dia_ids of the top 50 turns, best first."""
    if method == "facts→turns":
        group = f"{q['conv']}-obs"
        r = await kg.search(q["question"], group_id=group, config=wide(FACTS_RECIPE))
        episodes = await kg.store.episodes(group, [h.fact.edge.episodes[0] for h in r.facts])
        names = {e.uuid: e.name for e in episodes}
        ids = [d for h in r.facts for d in names[h.fact.edge.episodes[0]].split(",")]
        return list(dict.fromkeys(ids))
    r = await kg.search(q["question"], group_id=q["conv"], config=wide(method))
    return [h.episode.name for h in r.episodes]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="?", default=str(Path(__file__).parents[1] / "../shared/data"))
    ap.add_argument("--conversations", type=int, default=0, help="0 = all")
    ap.add_argument("--skip", type=int, default=0, help="start after this many conversations")
    ap.add_argument("--bm25-weights", type=float, nargs="*", default=[],
                    help="also run the RRF hybrid with BM25's vote weighted so")  # fmt: skip
    ap.add_argument("--cross-encoder", default=None, help="sentence-transformers model path")
    args = ap.parse_args()
    data = json.loads((Path(args.data) / "locomo" / "locomo_dev.json").read_text())
    convs = sorted({e["conv"] for e in data["episodes"]})
    convs = convs[args.skip :]
    if args.conversations:
        convs = convs[: args.conversations]
    queries = [q for q in data["queries"] if q["conv"] in convs and q["gold_dia_ids"]]

    methods = ["episodes_bm25", "episodes_cosine", "episodes_hybrid_rrf", "episodes_hybrid_mmr"]
    methods += [f"episodes_hybrid_rrf@bm25={w:g}" for w in args.bm25_weights]
    cross = None
    if args.cross_encoder:
        from kg.retrieval import SentenceTransformerCrossEncoder

        cross = SentenceTransformerCrossEncoder(args.cross_encoder)
        methods.append("episodes_hybrid_cross_encoder")
    methods.append("facts→turns")

    with tempfile.TemporaryDirectory(prefix="kg-locomo-") as home:
        async with await KG.open(home=home, embedder=local_minilm(), cross_encoder=cross) as kg:
            stats = await ingest(kg, data, convs)
            print(
                f"conversations: {len(convs)}, turns: {stats['turns']} "
                f"({stats['turn_seconds']:.0f} s), observation facts: {stats['observations']} "
                f"({stats['obs_seconds']:.0f} s), questions with evidence: {len(queries)}"
            )
            recall: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
            by_cat: dict[tuple[str, int], list[float]] = defaultdict(list)
            latency: dict[str, list[float]] = defaultdict(list)
            for q in queries:
                gold = set(q["gold_dia_ids"])
                for m in methods:
                    t0 = time.perf_counter()
                    got = await retrieve(kg, m, q)
                    latency[m].append((time.perf_counter() - t0) * 1000)
                    for k in KS:
                        recall[m][k].append(len(gold & set(got[:k])) / len(gold))
                    by_cat[(m, q["category"])].append(len(gold & set(got[:10])) / len(gold))

    print(f"\n{'method':<32}" + "".join(f"{'R@' + str(k):>8}" for k in KS)
          + f"{'p50 ms':>9}{'p95 ms':>9}")  # fmt: skip
    for m in methods:
        row = "".join(f"{100 * statistics.mean(recall[m][k]):>8.1f}" for k in KS)
        print(f"{m:<32}{row}{pct(latency[m], 50):>9.1f}{pct(latency[m], 95):>9.1f}")
    for name, ref in (("paper: DRAGON (10 convs)", (56.7, 66.2, 76.7, 82.7)),
                      ("paper: BM25 (10 convs)", (48.6, 56.3, 65.2, 72.9))):  # fmt: skip
        print(f"{name:<32}" + "".join(f"{v:>8.1f}" for v in ref))
    print("\nR@10 by category:")
    cats = sorted({q["category"] for q in queries})
    print(f"{'method':<32}" + "".join(f"{CATEGORIES[c]:>13}" for c in cats))
    for m in methods:
        print(f"{m:<32}" + "".join(f"{100 * statistics.mean(by_cat[(m, c)]):>13.1f}" for c in cats))
    counts = [f"{CATEGORIES[c]} {sum(1 for q in queries if q['category'] == c)}" for c in cats]
    print("questions per category: " + ", ".join(counts))


if __name__ == "__main__":
    asyncio.run(main())
