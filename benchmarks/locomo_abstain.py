"""Abstention on LoCoMo: can a score cutoff return an empty context for what was never said?

    python benchmarks/locomo_abstain.py [DATA_DIR] [--budget 0.05]

Over cached branch scores (see locomo_fusion.py), turn-level index. Three kinds of question:
answerable (categories 1-4, with evidence), LoCoMo's adversarial ones (category 5: about
something that *was* said, but by the other speaker), and foreign ones (another
conversation's answerable questions with its speakers renamed to this conversation's: the
names match, the content was never said; see locomo_data.foreign_questions).

Signals: `cosine`, the best cosine similarity (what `SearchConfig.abstain_below` uses);
`cosine_margin`, that minus the mean of the top 50; `bm25_share`, the best BM25 score over the
most the query could score (every term matched at saturating tf; the engine would need the
store to report it); `both`, the mean of cosine and bm25_share (each from its own best turn);
`joint`, the best turn's mean of the two (lexical and semantic agreement on one turn);
`cosine_unnamed`, the best cosine similarity of the question with the conversation's speaker
names taken out (the turns are embedded as they are): a name that every turn carries no
longer lifts a question about something never said. Three that ask no score to mean the same
across queries (issue 31 item 4): `agree`, minus the depth at which the two branches first
share a turn (the smallest d with a turn in the top d of both, within the engine's window of
50; 51 when none); `cosine_gap`, the best cosine similarity minus the second; `words_found`,
the share of the query's words (weighted by idf) that occur in the conversation at all.
A confidence signal per question is computed from what the engine sees; the cutoff is set on
the development conversations so that at most `--budget` of their answerable questions are
refused, and the same cutoff is then applied to the held-out conversations. Reported per
signal and split: the share refused of each kind, and R@10 of the answerable questions with
refused ones counted as retrieving nothing.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo_data as L
import locomo_fusion as F

from kg.store.cypher.bm25 import idf


def signals(
    data: dict[str, Any], convs: list[str], cache: L.EmbeddingCache, key: str = "turn"
) -> list[dict[str, Any]]:
    """One row per question: its kind, R@10 of the default recipe, and candidate signals."""
    rows = []
    pairs = L.foreign_pairs(data)
    for conv in convs:
        cv = L.conversation(data, conv)
        ids = {d: i for i, d in enumerate(cv.ids)}
        docs = cv.round(1, 0) if key == "prev" else cv.texts()
        bm = F.Bm25Index(docs)
        dv = cache.get(docs)
        own = [q for q in data["queries"] if q["conv"] == conv and q["gold_dia_ids"]]
        foreign = L.foreign_questions(data, conv, pairs[conv])
        names = re.compile(r"\b(" + "|".join(map(re.escape, L.speakers(data, conv))) + r")('s)?\b")
        unnamed = cache.get(
            [
                " ".join(names.sub(" ", q["question"]).split()) or q["question"]
                for q in own + foreign
            ]
        )
        for q, qv in zip(own + foreign, unnamed, strict=True):
            kind = (
                "foreign"
                if "foreign_from" in q
                else ("adversarial" if q["category"] == 5 else "answerable")
            )
            terms = F.tuned_query(q["question"])
            b = bm.scores(terms)
            c = dv @ cache.get([q["question"]])[0]
            fused = F.engine_fusion([b, c], F.W)
            # The most a document could score: every term matched, at the tf that saturates.
            ceiling = sum(idf(bm.df.get(t, 0), len(cv.ids)) * (bm.k1 + 1) for t in set(terms))
            top = float(np.max(b)) if np.isfinite(b).any() else 0.0
            share = np.where(np.isfinite(b), b, 0.0) / ceiling if ceiling else np.zeros(len(b))
            gold = None
            if kind != "foreign":
                gold = np.array([ids[d] for d in q["gold_dia_ids"] if d in ids])
            rows.append(
                {
                    "conv": conv,
                    "kind": kind,
                    "r10": F.recall_at(fused, gold)[1] if gold is not None and len(gold) else 0.0,
                    "cosine": float(c.max()),
                    "bm25_share": top / ceiling if ceiling else 0.0,
                    "cosine_margin": float(c.max() - np.sort(c)[-50:].mean()),
                    "both": 0.5 * float(c.max()) + 0.5 * (top / ceiling if ceiling else 0.0),
                    "joint": float((0.5 * c + 0.5 * share).max()),
                    "cosine_unnamed": float((dv @ qv).max()),
                    "agree": -agreement_depth(b, c),
                    "cosine_gap": float(np.diff(np.sort(c)[-2:])[0]),
                    "words_found": words_found(terms, bm.df, len(cv.ids)),
                }
            )
    return rows


WINDOW = 50  # candidates per branch, as SearchConfig.window


def agreement_depth(bm25: np.ndarray, cosine: np.ndarray) -> int:
    """The smallest d such that some turn is in the top d of both branches (WINDOW + 1: none
    within the window). BM25's -inf is no match."""
    top_c = {int(d): r for r, d in enumerate(np.argsort(-cosine)[:WINDOW])}
    found = np.flatnonzero(np.isfinite(bm25))
    top_b = found[np.argsort(-bm25[found], kind="stable")][:WINDOW]
    both = [max(r, top_c[int(d)]) for r, d in enumerate(top_b) if int(d) in top_c]
    return min(both) + 1 if both else WINDOW + 1


def words_found(terms: list[str], df: dict[str, int], n: int) -> float:
    """The idf-weighted share of the query's words that some turn holds (1 for no words)."""
    weights = {t: idf(df.get(t, 0), n) for t in set(terms)}
    total = sum(weights.values())
    return sum(w for t, w in weights.items() if df.get(t, 0)) / total if total else 1.0


def refused(rows: list[dict[str, Any]], signal: str, cut: float, kind: str) -> float:
    return 100 * float(np.mean([r[signal] < cut for r in rows if r["kind"] == kind]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="?", default=None)
    ap.add_argument(
        "--budget",
        type=float,
        default=0.05,
        help="share of answerable dev questions the cutoff may refuse",
    )
    ap.add_argument(
        "--cosine", type=float, default=None, help="also report this fixed cosine cutoff, e.g. 0.49"
    )
    ap.add_argument(
        "--key",
        choices=("turn", "prev"),
        default="turn",
        help="what a turn is indexed by: itself, or the engine's key for an "
        "unextracted turn (the previous turn and the turn)",
    )
    args = ap.parse_args()
    data = L.load(args.data)
    cache = L.EmbeddingCache()
    parts = L.split(data)
    rows = {p: signals(data, parts[p], cache, args.key) for p in ("dev", "held-out")}
    rows["all"] = rows["dev"] + rows["held-out"]
    kinds = ("answerable", "adversarial", "foreign")
    counts = {p: {k: sum(r["kind"] == k for r in rs) for k in kinds} for p, rs in rows.items()}
    print(
        "questions: "
        + "; ".join(
            f"{p} " + ", ".join(f"{k} {n}" for k, n in c.items()) for p, c in counts.items()
        )
    )
    signals_ = (
        "cosine",
        "cosine_margin",
        "bm25_share",
        "both",
        "joint",
        "cosine_unnamed",
        "agree",
        "cosine_gap",
        "words_found",
    )
    runs = [(sig, None) for sig in signals_]
    if args.cosine is not None:
        runs.append(("cosine", args.cosine))
    for sig, fixed in runs:
        answerable = np.array([r[sig] for r in rows["dev"] if r["kind"] == "answerable"])
        cut = fixed if fixed is not None else float(np.quantile(answerable, args.budget))
        why = "fixed" if fixed is not None else f"refuses {args.budget:.0%} of answerable dev"
        print(f"\n{sig}: cutoff {cut:.3f} ({why})")
        print(
            f"{'split':<10}{'refused: answerable':>20}{'adversarial':>13}{'foreign':>9}"
            f"{'R@10 before':>13}{'R@10 after':>12}{'AUC foreign':>13}"
        )
        for part, rs in rows.items():
            ans = [r for r in rs if r["kind"] == "answerable"]
            before = 100 * float(np.mean([r["r10"] for r in ans]))
            after = 100 * float(np.mean([0.0 if r[sig] < cut else r["r10"] for r in ans]))
            pos = np.array([r[sig] for r in ans])
            neg = np.array([r[sig] for r in rs if r["kind"] == "foreign"])
            auc = float(
                (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
            )
            share = [refused(rs, sig, cut, k) for k in kinds]
            print(
                f"{part:<10}{share[0]:>20.1f}{share[1]:>13.1f}{share[2]:>9.1f}"
                f"{before:>13.1f}{after:>12.1f}{auc:>13.3f}"
            )


if __name__ == "__main__":
    main()
