"""Fusion, BM25 and index-key experiments on LoCoMo over cached branch scores (no store).

    python benchmarks/locomo_fusion.py [DATA_DIR] [--keys turn facts round] [--sweep]

Why it exists: the machine has two shared cores, and the engine path (locomo_recall.py) takes
minutes per run. Here each branch is computed once per conversation in numpy (BM25 with the
engine's own analyzer and formula, cosine over cached MiniLM vectors, see locomo_data.py),
and each fusion is a function of those score vectors, so a candidate costs milliseconds.
locomo_recall.py then confirms the chosen recipe through the real store.

Protocol: choices are made on the development conversations (the first three) and reported on
the other three and on all six. Recall@k is the LoCoMo paper's: the share of a question's gold
turns among the top k, averaged over the questions with evidence.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo_data as L

from kg.retrieval.config import SCORE_WEIGHTS, Method
from kg.retrieval.dated import asks_when, says_when
from kg.retrieval.fusion import score_fusion
from kg.retrieval.query import keyword_query
from kg.store.cypher.analyzer import query_terms
from kg.store.cypher.bm25 import idf, query_tokens, tokens

KS = (5, 10, 25, 50)
# What an episode is indexed by: the turn alone; the turn and the facts extracted from it
# (K = V + fact); the turn with its neighbours (round: one before, one after; prev: the one
# before, i.e. usually the question it answers); prev and facts together.
KEYS = ("turn", "facts", "round", "prev", "prevfacts")
WINDOW = 100  # candidates per branch, as locomo_recall.py's wide() configures the engine


@dataclass
class Bm25Index:
    """Okapi BM25 over one conversation's documents, the engine's analyzer by default."""

    docs: Sequence[str]
    k1: float = 1.2
    b: float = 0.75
    analyze: Callable[[str], list[str]] = tokens
    bags: list[Counter[str]] = field(init=False)
    df: Counter[str] = field(init=False)
    lengths: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.bags = [Counter(self.analyze(d)) for d in self.docs]
        self.df = Counter(t for bag in self.bags for t in bag)
        self.lengths = np.array([sum(b.values()) for b in self.bags], dtype=np.float64)
        self._postings: dict[str, list[tuple[int, int]]] = {}
        for i, bag in enumerate(self.bags):
            for t, tf in bag.items():
                self._postings.setdefault(t, []).append((i, tf))

    def scores(self, terms: Sequence[str], pool_avgdl: bool = True) -> np.ndarray:
        """BM25 per document; -inf for documents matching no term (the engine's pool)."""
        n = len(self.docs)
        out = np.zeros(n)
        hit = np.zeros(n, dtype=bool)
        terms = list(dict.fromkeys(terms))
        for t in terms:
            for i, _ in self._postings.get(t, []):
                hit[i] = True
        if not hit.any():
            return np.full(n, -np.inf)
        avgdl = self.lengths[hit].mean() if pool_avgdl else self.lengths.mean()
        norm = self.k1 * (1.0 - self.b + self.b * self.lengths / avgdl)
        for t in terms:
            w = idf(self.df.get(t, 0), n)
            for i, tf in self._postings.get(t, []):
                out[i] += w * tf * (self.k1 + 1.0) / (tf + norm[i])
        out[~hit] = -np.inf
        return out


def engine_query(q: str) -> list[str]:
    return [tok for _, tok in query_tokens(query_terms(q))]


def tuned_query(q: str) -> list[str]:
    """The engine's full-text query: question words dropped (kg.retrieval.query)."""
    return engine_query(keyword_query(q))


# BM25 constants chosen on dev (the engine uses k1 1.2, b 0.75): turns are short, and the
# longer ones carry the information, so length normalisation only hurts here.
TUNED = {"k1": 0.9, "b": 0.0}


# -- fusion: each takes per-branch score vectors (-inf = not found) and returns one ----------


def window_mask(s: np.ndarray, w: int | None = None) -> np.ndarray:
    w = w or WINDOW
    m = np.zeros(len(s), dtype=bool)
    finite = np.isfinite(s)
    order = np.argsort(-np.where(finite, s, -np.inf), kind="stable")[:w]
    m[order] = finite[order]
    return m


def ranks(s: np.ndarray) -> np.ndarray:
    r = np.empty(len(s))
    r[np.argsort(-s, kind="stable")] = np.arange(1, len(s) + 1)
    return r


def rrf(branches: Sequence[np.ndarray], weights: Sequence[float], k: float = 60.0) -> np.ndarray:
    out = np.zeros(len(branches[0]))
    for s, w in zip(branches, weights, strict=True):
        m = window_mask(s)
        out[m] += w / (k + ranks(s)[m])
    return np.where(out > 0, out, -np.inf)


def normalised(s: np.ndarray, how: str) -> np.ndarray:
    """A branch's window scores on a common scale; 0 outside the window."""
    m = window_mask(s)
    out = np.zeros(len(s))
    if not m.any():
        return out
    v = s[m]
    if how == "minmax":
        lo, hi = v.min(), v.max()
        out[m] = (v - lo) / (hi - lo) if hi > lo else 1.0
    elif how == "max":
        out[m] = v / v.max() if v.max() > 0 else 0.0
    elif how == "dbsf":  # Weaviate's distribution-based: mean +- 3 sd -> [0, 1]
        mu, sd = v.mean(), v.std() or 1.0
        out[m] = np.clip((v - (mu - 3 * sd)) / (6 * sd), 0, 1)
    elif how == "z":
        mu, sd = v.mean(), v.std() or 1.0
        out[m] = (v - mu) / sd
        out[m] -= out[m].min() - 1e-9  # keep window members above the zero of the rest
    elif how == "rank":
        out[m] = 1.0 - (ranks(s)[m] - 1) / WINDOW
    else:
        raise ValueError(how)
    return out


def convex(branches: Sequence[np.ndarray], weights: Sequence[float], how: str) -> np.ndarray:
    out = np.zeros(len(branches[0]))
    any_m = np.zeros(len(branches[0]), dtype=bool)
    for s, w in zip(branches, weights, strict=True):
        out += w * normalised(s, how)
        any_m |= window_mask(s)
    return np.where(any_m, out, -np.inf)


# -- evaluation ---------------------------------------------------------------------------


@dataclass
class Case:
    q: dict[str, Any]
    gold: np.ndarray  # indices of gold turns
    branches: dict[str, np.ndarray]


def recall_at(score: np.ndarray, gold: np.ndarray) -> list[float]:
    finite = np.isfinite(score)
    order = np.argsort(-np.where(finite, score, -np.inf), kind="stable")
    order = order[finite[order]][: max(KS)]
    pos = {int(i): r for r, i in enumerate(order)}
    out = []
    for k in KS:
        out.append(sum(1 for g in gold if pos.get(int(g), 10**9) < k) / len(gold))
    return out


def table(cases: Sequence[Case], fuse: Callable[[Case], np.ndarray]) -> np.ndarray:
    return np.array([recall_at(fuse(c), c.gold) for c in cases]) * 100


def build_cases(
    data: dict[str, Any],
    convs: Sequence[str],
    cache: L.EmbeddingCache,
    keys: Sequence[str] = ("turn",),
    bm25_kw: dict[str, Any] | None = None,
) -> list[Case]:
    cases = []
    for conv in convs:
        cv = L.conversation(data, conv)
        ids = {d: i for i, d in enumerate(cv.ids)}
        qs = L.questions(data, [conv])
        qv = cache.get([q["question"] for q in qs])
        says = np.array([says_when(t) for t in cv.texts()], dtype=bool)
        docs = {
            "turn": cv.texts(),
            "facts": cv.with_facts(),
            "round": cv.round(1, 1),
            "prev": cv.round(1, 0),
            "prevfacts": cv.prev_with_facts(),
        }
        per_key = {}
        for key in keys:
            bm = Bm25Index(docs[key], **(bm25_kw or {}))
            dv = cache.get(docs[key])
            per_key[key] = (bm, Bm25Index(docs[key], **TUNED), qv @ dv.T)
        for j, q in enumerate(qs):
            gold = np.array([ids[d] for d in q["gold_dia_ids"] if d in ids])
            if not len(gold):
                continue
            br = {}
            terms = engine_query(q["question"])
            tuned = tuned_query(q["question"]) or terms
            for key, (bm, bmt, cos) in per_key.items():
                br[f"bm25:{key}"] = bm.scores(terms)  # the engine before this work
                br[f"bm25q:{key}"] = bm.scores(tuned)  # question words dropped
                br[f"bm25t:{key}"] = bmt.scores(tuned)  # and k1, b tuned
                br[f"cos:{key}"] = cos[j]
            br["says_when"] = says  # turns that date something by their own words
            cases.append(Case(q=q, gold=gold, branches=br))
    return cases


def summary(name: str, rows: dict[str, np.ndarray]) -> str:
    cells = []
    for part in rows:
        m = rows[part].mean(axis=0)
        cells.append(" ".join(f"{v:5.1f}" for v in m))
    return f"{name:<48}" + " | ".join(cells)


def hits(s: np.ndarray) -> list[tuple[str, float]]:
    """A branch's score vector as the engine sees it: its top WINDOW hits, best first."""
    order = np.argsort(-s, kind="stable")[:WINDOW]
    return [(str(i), float(s[i])) for i in order if np.isfinite(s[i])]


def engine_fusion(branches: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """kg.retrieval.fusion.score_fusion itself, over the cached branch scores."""
    out = np.full(len(branches[0]), -np.inf)
    for uuid, score in score_fusion([hits(s) for s in branches], weights=weights):
        out[int(uuid)] = score
    return out


W = (SCORE_WEIGHTS[Method.bm25], SCORE_WEIGHTS[Method.cosine])


def report_rows(keys: Sequence[str]) -> list[tuple[str, Callable[[Case], np.ndarray]]]:
    rows: list[tuple[str, Callable[[Case], np.ndarray]]] = [
        ("BM25, all words (engine before)", lambda c: c.branches["bm25:turn"]),
        ("BM25, question words dropped", lambda c: c.branches["bm25q:turn"]),
        ("BM25, and k1 0.9, b 0", lambda c: c.branches["bm25t:turn"]),
        ("cosine (MiniLM)", lambda c: c.branches["cos:turn"]),
        (
            "RRF, all words (episodes_hybrid_rrf before)",
            lambda c: rrf([c.branches["bm25:turn"], c.branches["cos:turn"]], [1, 1]),
        ),
        (
            "score fusion (episodes_hybrid)",
            lambda c: engine_fusion([c.branches["bm25q:turn"], c.branches["cos:turn"]], W),
        ),
        (
            "score fusion, k1 0.9, b 0",
            lambda c: engine_fusion([c.branches["bm25t:turn"], c.branches["cos:turn"]], W),
        ),
    ]
    for key in (k for k in keys if k != "turn"):
        rows += [
            (f"[{key}] BM25, question words dropped", lambda c, k=key: c.branches[f"bm25q:{k}"]),
            (f"[{key}] BM25, and k1 0.9, b 0", lambda c, k=key: c.branches[f"bm25t:{k}"]),
            (f"[{key}] cosine", lambda c, k=key: c.branches[f"cos:{k}"]),
            (
                f"[{key}] score fusion",
                lambda c, k=key: engine_fusion(
                    [c.branches[f"bm25q:{k}"], c.branches[f"cos:{k}"]], W
                ),
            ),
            (
                f"[{key}] score fusion, k1 0.9, b 0",
                lambda c, k=key: engine_fusion(
                    [c.branches[f"bm25t:{k}"], c.branches[f"cos:{k}"]], W
                ),
            ),
        ]
    return rows


def sweep_rows(keys: Sequence[str]) -> list[tuple[str, Callable[[Case], np.ndarray]]]:
    """The grid the choices were made from (run it with --parts dev)."""
    rows: list[tuple[str, Callable[[Case], np.ndarray]]] = []
    for key, bm in ((k, bm) for k in keys for bm in ("bm25", "bm25q", "bm25t")):
        b, v = f"{bm}:{key}", f"cos:{key}"
        rows.append((b, lambda c, b=b: c.branches[b]))
        for w in (1, 2):
            rows.append(
                (
                    f"rrf {b} x{w}",
                    lambda c, b=b, v=v, w=w: rrf([c.branches[b], c.branches[v]], [w, 1]),
                )
            )
        for how in ("minmax", "dbsf", "z", "rank", "max"):
            for a in (0.5, 0.6, 0.7, 0.8):
                rows.append(
                    (
                        f"{how} {b} a={a}",
                        lambda c, b=b, v=v, how=how, a=a: convex(
                            [c.branches[b], c.branches[v]], [a, 1 - a], how
                        ),
                    )
                )
    return rows


def dated(fused: np.ndarray, c: Case, boost: float) -> np.ndarray:
    """The engine's dated boost: a question asking when lifts the turns that say when."""
    if not boost or not asks_when(c.q["question"]):
        return fused
    return np.where(c.branches["says_when"] & np.isfinite(fused), fused * (1.0 + boost), fused)


def dated_rows(key: str) -> list[tuple[str, Callable[[Case], np.ndarray]]]:
    """BM25, the default's fusion, and the fusion with a dated boost (choose it on dev)."""
    b, v = f"bm25q:{key}", f"cos:{key}"
    rows: list[tuple[str, Callable[[Case], np.ndarray]]] = [
        (f"[{key}] BM25", lambda c: c.branches[b])
    ]
    for boost in (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0):
        rows.append(
            (
                f"[{key}] score fusion, dated boost {boost}",
                lambda c, x=boost: dated(engine_fusion([c.branches[b], c.branches[v]], W), c, x),
            )
        )
    return rows


def by_category(cases: Sequence[Case], fuse: Callable[[Case], np.ndarray]) -> str:
    cats = sorted({c.q["category"] for c in cases})
    cells = []
    for cat in cats:
        mine = [c for c in cases if c.q["category"] == cat]
        cells.append(f"{L.CATEGORIES[cat][:6]} {table(mine, fuse)[:, 1].mean():5.1f}")
    return "  R@10 " + "  ".join(cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="?", default=None)
    ap.add_argument(
        "--keys",
        nargs="*",
        default=["turn"],
        choices=KEYS,
        help="what an episode is indexed by (turn is always included)",
    )
    ap.add_argument(
        "--parts",
        nargs="*",
        default=["dev", "held-out", "all"],
        help="splits to print (choose on dev before looking at the rest)",
    )
    ap.add_argument("--sweep", action="store_true", help="the fusion grid instead of the report")
    ap.add_argument(
        "--dated", action="store_true", help="the dated boost's grid by category, last of --keys"
    )
    args = ap.parse_args()
    keys = list(dict.fromkeys(["turn", *args.keys]))
    data = L.load(args.data)
    cache = L.EmbeddingCache()
    parts = L.split(data)
    need = ["dev", "held-out"] if "all" in args.parts else args.parts
    cases = {p: build_cases(data, parts[p], cache, keys) for p in need}
    if "all" in args.parts:
        cases["all"] = cases["dev"] + cases["held-out"]
    cases = {p: cases[p] for p in args.parts}
    print(
        f"{'recall@5/10/25/50':<48}"
        + " | ".join(f"{p} ({len(cases[p])} q)".ljust(23) for p in args.parts)
    )
    if args.dated:
        for name, fuse in dated_rows(keys[-1]):
            print(summary(name, {p: table(cs, fuse) for p, cs in cases.items()}), flush=True)
            for p, cs in cases.items():
                print(f"  {p:<9}" + by_category(cs, fuse), flush=True)
        return
    for name, fuse in sweep_rows(keys) if args.sweep else report_rows(keys):
        print(summary(name, {p: table(cs, fuse) for p, cs in cases.items()}), flush=True)


if __name__ == "__main__":
    main()
