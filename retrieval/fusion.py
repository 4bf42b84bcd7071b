"""Fusion and diversity: score fusion, reciprocal rank fusion, maximal marginal relevance.

Pure functions over each branch's ranked (uuid, score) hits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def rrf(
    rankings: Sequence[Sequence[str]],
    *,
    k: float = 60.0,
    window: int | None = None,
    weights: Sequence[float] | None = None,
) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: score(d) = sum over rankings of w / (k + rank(d)), rank from 1.

    Only each ranking's first `window` items count; `weights` (default 1 each) scale a
    ranking's vote. Ties keep the order of first appearance, so the result is deterministic.
    """
    if weights is not None and len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    scores: dict[str, float] = {}
    for i, ranking in enumerate(rankings):
        w = 1.0 if weights is None else weights[i]
        for rank, uuid in enumerate(ranking[:window] if window else ranking, start=1):
            scores[uuid] = scores.get(uuid, 0.0) + w / (k + rank)
    order = {u: i for i, u in enumerate(scores)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))


def score_fusion(
    branches: Sequence[Sequence[tuple[str, float]]],
    *,
    weights: Sequence[float] | None = None,
    window: int | None = None,
) -> list[tuple[str, float]]:
    """Convex combination of min-max normalised branch scores: sum of w * (s - min) / (max - min)
    with the weights scaled to sum to 1, so a fused score lies in [0, 1].

    RRF keeps only ranks, so a weak branch's 1st place counts as much as a strong branch's,
    whatever the margins; here a branch's vote follows how far above its own tail an item
    scores, so a branch that separates its top hit from the rest counts more for that query.
    Each branch is normalised over its first `window` hits (best first); an item a branch did
    not find gets 0 from it, and a branch whose scores are all equal gives each of them 1.
    Weights default to an equal share. Ties keep the order of first appearance.
    """
    weights = [1.0] * len(branches) if weights is None else list(weights)
    if len(weights) != len(branches):
        raise ValueError(f"{len(weights)} weights for {len(branches)} branches")
    total = sum(weights)
    scores: dict[str, float] = {}
    for hits, weight in zip(branches, weights, strict=True):
        w = weight / total
        top = list(hits[:window] if window else hits)
        if not top:
            continue
        values = [s for _, s in top]
        lo, hi = min(values), max(values)
        for uuid, s in top:
            norm = (s - lo) / (hi - lo) if hi > lo else 1.0
            scores[uuid] = scores.get(uuid, 0.0) + w * norm
    order = {u: i for i, u in enumerate(scores)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def mmr(
    candidates: Sequence[tuple[str, float]],
    vectors: Mapping[str, Sequence[float]],
    query: Sequence[float],
    *,
    lam: float = 0.5,
    limit: int,
) -> list[tuple[str, float]]:
    """Maximal marginal relevance: greedily pick argmax lam * sim(q, d) - (1 - lam) * max
    sim(d, s) over the already-selected s.

    Vectors are unit length, so sim is a dot product. A candidate without a vector (written
    before its embedding) keeps its fused score, scaled into [0, 1], as relevance and gets no
    redundancy penalty: it can be ranked, though not de-duplicated. One similarity matrix,
    then O(n) per pick: 100 candidates take well under a millisecond.
    """
    if not candidates:
        return []
    uuids = [u for u, _ in candidates]
    top = max(s for _, s in candidates) or 1.0
    has = np.array([u in vectors for u in uuids])
    dim = len(query)
    mat = np.array([vectors[u] if u in vectors else [0.0] * dim for u in uuids], dtype=np.float64)
    fused = np.array([s / top for _, s in candidates])
    relevance = np.where(has, mat @ np.asarray(query, dtype=np.float64), fused)
    sim = mat @ mat.T  # rows of vector-less candidates are zero: no penalty either way
    penalty = np.zeros(len(uuids))
    free = np.ones(len(uuids), dtype=bool)
    selected: list[tuple[str, float]] = []
    while free.any() and len(selected) < limit:
        score = lam * relevance - (1.0 - lam) * penalty
        score[~free] = -np.inf
        best = int(np.argmax(score))  # first maximum: ties keep the fused order
        selected.append((uuids[best], float(score[best])))
        free[best] = False
        penalty = sim[best].copy() if len(selected) == 1 else np.maximum(penalty, sim[best])
    return selected
