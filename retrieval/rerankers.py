"""Rerankers beyond fusion: a cross-encoder, node distance from a centre, episode mentions.

Each takes the fused candidates (uuid, score), best first, and returns them reordered with the
score the ordering is by. Ties always fall back to the fused order.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class CrossEncoder(Protocol):
    """Scores (query, passage) pairs jointly; higher is more relevant."""

    model: str

    async def score(self, query: str, passages: Sequence[str]) -> list[float]: ...


class SentenceTransformerCrossEncoder:
    """sentence-transformers' `CrossEncoder` (e.g. cross-encoder/ms-marco-MiniLM-L-6-v2),
    loaded from a local path or name; run in a thread, one call at a time."""

    def __init__(self, model: str, *, device: str = "cpu", batch_size: int = 32) -> None:
        from sentence_transformers import CrossEncoder as STCrossEncoder

        self.model = model
        self._ce: Any = STCrossEncoder(model, device=device)
        self.batch_size = batch_size
        # One predict at a time (the model is not re-entrant). A thread lock, taken in the
        # worker thread, as the embedder's: an asyncio.Lock is tied to one event loop, and a
        # KG shared between loops or threads (the CLI runs its own) would fail or overlap.
        self._lock = threading.Lock()

    def _predict(self, pairs: list[tuple[str, str]]) -> Any:
        with self._lock:
            return self._ce.predict(pairs, batch_size=self.batch_size, show_progress_bar=False)

    async def score(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        scores = await asyncio.to_thread(self._predict, [(query, p) for p in passages])
        return [float(s) for s in scores]


def by_key(
    candidates: Sequence[tuple[str, float]], key: Mapping[str, float], *, default: float = 0.0
) -> list[tuple[str, float]]:
    """Reorder by a per-item value, highest first; the value becomes the score. Stable, so the
    fused order breaks ties; items without a value get `default`."""
    ranked = sorted(enumerate(candidates), key=lambda ic: (-key.get(ic[1][0], default), ic[0]))
    return [(u, key.get(u, default)) for _, (u, _) in ranked]
