"""Fusion and diversity: reciprocal rank fusion and maximal marginal relevance. Pure functions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def rrf(rankings: Sequence[Sequence[str]], *, k: float = 60.0, window: int | None = None
        ) -> list[tuple[str, float]]:  # fmt: skip
    """Reciprocal rank fusion: score(d) = sum over rankings of 1 / (k + rank(d)), rank from 1.

    Only each ranking's first `window` items count. Ties keep the order of first appearance,
    so the result is deterministic.
    """
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, uuid in enumerate(ranking[:window] if window else ranking, start=1):
            scores[uuid] = scores.get(uuid, 0.0) + 1.0 / (k + rank)
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
    redundancy penalty: it can be ranked, though not de-duplicated.
    """
    if not candidates:
        return []
    top = max(s for _, s in candidates) or 1.0
    relevance = {u: dot(query, vectors[u]) if u in vectors else s / top for u, s in candidates}
    selected: list[tuple[str, float]] = []
    remaining = [u for u, _ in candidates]
    while remaining and len(selected) < limit:
        best, best_score = remaining[0], float("-inf")
        for u in remaining:
            penalty = 0.0
            if u in vectors and selected:
                penalty = max(
                    (dot(vectors[u], vectors[s]) for s, _ in selected if s in vectors),
                    default=0.0,
                )
            score = lam * relevance[u] - (1.0 - lam) * penalty
            if score > best_score:
                best, best_score = u, score
        selected.append((best, best_score))
        remaining.remove(best)
    return selected
