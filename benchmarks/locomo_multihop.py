"""Multi-hop and open-domain expansions on LoCoMo over cached branch scores (no store).

    KG_BENCH_CACHE=DIR python benchmarks/locomo_multihop.py [DATA_DIR] [--parts dev]

Issue 31 items 1 and 2, without an LLM and without entities (raw turns): a second pass
seeded by the first (pseudo-relevance feedback, RM3-like: the salient words of the first
pass's top turns join the query, and the top turns' vectors the query's), neighbour
expansion (a turn next to a hit in its session), and a speaker boost (turns said by a person
the question names). Each is a function of the cached branch scores of locomo_fusion.py, so
a candidate costs milliseconds; choose on dev, then print held-out once.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo_data as L
from locomo_fusion import Bm25Index, W, by_category, engine_fusion, summary, table, tuned_query

from kg.retrieval.dated import asks_when, says_when
from kg.store.cypher.bm25 import idf


@dataclass
class Case:
    q: dict[str, Any]
    gold: np.ndarray
    branches: dict[str, np.ndarray]
    terms: list[str]
    qv: np.ndarray
    conv: Any  # the conversation's shared arrays (ConvData)


@dataclass
class ConvData:
    bm: Bm25Index
    dv: np.ndarray  # key vectors, unit
    session: np.ndarray
    speaker: np.ndarray
    says: np.ndarray
    names: list[str]


def build(data: dict[str, Any], convs: list[str], cache: L.EmbeddingCache) -> list[Case]:
    out = []
    for conv in convs:
        cv = L.conversation(data, conv)
        ids = {d: i for i, d in enumerate(cv.ids)}
        docs = cv.round(1, 0)  # the engine's key for raw turns: the previous turn and the turn
        cd = ConvData(
            bm=Bm25Index(docs),
            dv=cache.get(docs),
            session=np.array([t["session"] for t in cv.turns]),
            speaker=np.array([t["speaker"] for t in cv.turns]),
            says=np.array([says_when(t) for t in cv.texts()], dtype=bool),
            names=L.speakers(data, conv),
        )
        qs = L.questions(data, [conv])
        qv = cache.get([q["question"] for q in qs])
        cos = qv @ cd.dv.T
        for j, q in enumerate(qs):
            gold = np.array([ids[d] for d in q["gold_dia_ids"] if d in ids])
            if not len(gold):
                continue
            terms = tuned_query(q["question"])
            br = {"bm25": cd.bm.scores(terms), "cos": cos[j]}
            out.append(Case(q=q, gold=gold, branches=br, terms=terms, qv=qv[j], conv=cd))
    return out


def dated(c: Case, fused: np.ndarray, boost: float = 1.0) -> np.ndarray:
    if not asks_when(c.q["question"]):
        return fused
    return np.where(c.conv.says & np.isfinite(fused), fused * (1.0 + boost), fused)


def default(c: Case) -> np.ndarray:
    """episodes_hybrid with the dated boost: today's default."""
    return dated(c, engine_fusion([c.branches["bm25"], c.branches["cos"]], W))


def top(s: np.ndarray, m: int) -> np.ndarray:
    fin = np.isfinite(s)
    order = np.argsort(-np.where(fin, s, -np.inf), kind="stable")[:m]
    return order[fin[order]]


def expansion_terms(c: Case, first: np.ndarray, m: int, n: int) -> list[str]:
    """The n words weighing most in the first pass's top m turns (tf-idf, weighted by the
    turn's fused score), other than the query's own."""
    bm = c.conv.bm
    weight: Counter[str] = Counter()
    hits = top(first, m)
    for i in hits:
        bag = bm.bags[int(i)]
        length = sum(bag.values()) or 1
        for t, tf in bag.items():
            weight[t] += first[i] * tf / length * idf(bm.df[t], len(bm.docs))
    for t in c.terms:
        weight.pop(t, None)
    return [t for t, _ in weight.most_common(n)]


def prf(c: Case, m: int, n: int, alpha: float, lam: float, mode: str = "both") -> np.ndarray:
    """A second pass: BM25 on the query plus the top turns' salient words, cosine on the
    query's vector plus alpha times the top turns' mean; fused, then mixed with the first."""
    first = default(c)
    hits = top(first, m)
    if not len(hits):
        return first
    b2 = c.branches["bm25"]
    if mode in ("both", "bm25"):
        b2 = c.conv.bm.scores(c.terms + expansion_terms(c, first, m, n))
    v2 = c.branches["cos"]
    if mode in ("both", "cos"):
        q2 = c.qv + alpha * c.conv.dv[hits].mean(axis=0)
        v2 = c.conv.dv @ (q2 / np.linalg.norm(q2))
    second = dated(c, engine_fusion([b2, v2], W))
    a = np.where(np.isfinite(first), first, 0.0)
    b = np.where(np.isfinite(second), second, 0.0)
    both = np.isfinite(first) | np.isfinite(second)
    return np.where(both, (1 - lam) * a + lam * b, -np.inf)


def neighbours(
    c: Case, beta: float, base: Callable[[Case], np.ndarray] = default, m: int = 0
) -> np.ndarray:
    """A turn next to a hit in its session gets beta times that hit's score (the top m hits
    only, when m is given: what the engine reads the neighbours of)."""
    f = base(c)
    a = np.where(np.isfinite(f), f, 0.0)
    if m:
        spread = np.zeros(len(a))
        spread[top(f, m)] = a[top(f, m)]
    else:
        spread = a
    same_prev = np.r_[False, c.conv.session[1:] == c.conv.session[:-1]]
    lift = np.zeros(len(a))
    lift[1:] = np.where(same_prev[1:], spread[:-1], 0.0)
    nxt = np.zeros(len(a))
    nxt[:-1] = np.where(same_prev[1:], spread[1:], 0.0)
    out = a + beta * np.maximum(lift, nxt)
    return np.where(np.isfinite(f) | (out > 0), out, -np.inf)


def neighbours_in_pool(c: Case, beta: float) -> np.ndarray:
    """As neighbours(), but only candidates already found are lifted (no store read)."""
    f = default(c)
    out = neighbours(c, beta)
    return np.where(np.isfinite(f), out, -np.inf)


def named(c: Case) -> set[str]:
    return {n for n in c.conv.names if re.search(rf"\b{re.escape(n)}\b", c.q["question"])}


def speaker_boost(
    c: Case, gamma: float, base: Callable[[Case], np.ndarray] = default
) -> np.ndarray:
    """Turns said by a speaker the question names get their score times (1 + gamma), when
    the question names exactly one of them."""
    f = base(c)
    who = named(c)
    if len(who) != 1:
        return f
    mine = np.isin(c.conv.speaker, list(who))
    return np.where(mine & np.isfinite(f), f * (1 + gamma), f)


def rows() -> list[tuple[str, Callable[[Case], np.ndarray]]]:
    r: list[tuple[str, Callable[[Case], np.ndarray]]] = [
        ("BM25", lambda c: c.branches["bm25"]),
        ("default (hybrid + dated)", default),
    ]
    for m in (3, 5, 10):
        for n in (5, 10, 20):
            for lam in (0.3, 0.5):
                r.append(
                    (
                        f"prf m={m} n={n} a=0.5 lam={lam}",
                        lambda c, m=m, n=n, lam=lam: prf(c, m, n, 0.5, lam),
                    )
                )
    for mode in ("bm25", "cos"):
        r.append(
            (f"prf {mode} only m=5 n=10 lam=0.3", lambda c, mo=mode: prf(c, 5, 10, 0.5, 0.3, mo))
        )
    for alpha in (0.25, 1.0):
        r.append((f"prf m=5 n=10 a={alpha} lam=0.3", lambda c, a=alpha: prf(c, 5, 10, a, 0.3)))
    for beta in (0.1, 0.2, 0.3, 0.5):
        r.append((f"neighbours beta={beta}", lambda c, b=beta: neighbours(c, b)))
    for gamma in (0.1, 0.2, 0.3, 0.5):
        r.append((f"speaker gamma={gamma}", lambda c, g=gamma: speaker_boost(c, g)))
    return r


def combos() -> list[tuple[str, Callable[[Case], np.ndarray]]]:
    r: list[tuple[str, Callable[[Case], np.ndarray]]] = [
        ("BM25", lambda c: c.branches["bm25"]),
        ("default (hybrid + dated)", default),
    ]
    for beta in (0.5, 0.75, 1.0):
        r.append((f"neighbours beta={beta}", lambda c, b=beta: neighbours(c, b)))
        r.append((f"pool neighbours beta={beta}", lambda c, b=beta: neighbours_in_pool(c, b)))
    for m in (5, 10, 20, 50):
        r.append((f"neighbours 0.5 of top {m}", lambda c, m=m: neighbours(c, 0.5, m=m)))
        r.append(
            (
                f"speaker 0.2 + neighbours 0.5 of top {m}",
                lambda c, m=m: neighbours(c, 0.5, lambda x: speaker_boost(x, 0.2), m=m),
            )
        )
    for g in (0.05, 0.1, 0.2):
        for beta in (0.3, 0.5):
            r.append(
                (
                    f"speaker {g} + neighbours {beta}",
                    lambda c, g=g, b=beta: neighbours(c, b, lambda x: speaker_boost(x, g)),
                )
            )
    for beta in (0.3, 0.5):
        r.append(
            (
                f"prf m=3 n=20 lam=0.3 + neighbours {beta}",
                lambda c, b=beta: neighbours(c, b, lambda x: prf(x, 3, 20, 0.5, 0.3)),
            )
        )
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="?", default=None)
    ap.add_argument("--parts", nargs="*", default=["dev"])
    ap.add_argument("--combos", action="store_true", help="the second grid")
    ap.add_argument("--only", nargs="*", default=None, help="row names to print (prefixes)")
    args = ap.parse_args()
    data = L.load(args.data)
    cache = L.EmbeddingCache()
    parts = L.split(data)
    cases = {p: build(data, parts[p], cache) for p in args.parts}
    for name, fuse in combos() if args.combos else rows():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        print(summary(name, {p: table(cs, fuse) for p, cs in cases.items()}), flush=True)
        for p, cs in cases.items():
            print(f"  {p:<9}" + by_category(cs, fuse), flush=True)


if __name__ == "__main__":
    main()
