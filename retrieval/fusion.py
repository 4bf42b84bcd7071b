"""Fusion and diversity: reciprocal rank fusion and maximal marginal relevance. Pure functions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def rrf(rankings: Sequence[Sequence[str]], *, k: float = 60.0, window: int | None = None,
        weights: Sequence[float] | None = None) -> list[tuple[str, float]]:  # fmt: skip
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
