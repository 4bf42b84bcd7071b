"""The sentence-transformers cross-encoder is shared like the embedder: any event loop, any
thread, and the model (not re-entrant) runs one batch at a time."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import types
from collections.abc import Sequence
from typing import Any

import pytest

from kg.retrieval import SentenceTransformerCrossEncoder


class SlowModel:
    """Stands in for sentence_transformers.CrossEncoder: records overlapping predict calls."""

    def __init__(self, model: str, *, device: str) -> None:
        self.running = self.most_running = 0
        self.guard = threading.Lock()

    def predict(self, pairs: Sequence[tuple[str, str]], **_: Any) -> list[float]:
        with self.guard:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        time.sleep(0.02)
        with self.guard:
            self.running -= 1
        return [float(len(p)) for _, p in pairs]


@pytest.fixture
def ce(monkeypatch: pytest.MonkeyPatch) -> SentenceTransformerCrossEncoder:
    fake = types.ModuleType("sentence_transformers")
    fake.CrossEncoder = SlowModel  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    return SentenceTransformerCrossEncoder("slow")


async def three(ce: SentenceTransformerCrossEncoder) -> list[list[float]]:
    return list(await asyncio.gather(*(ce.score("q", ["a", "bb"]) for _ in range(3))))


def test_the_cross_encoder_serves_one_event_loop_after_another(
    ce: SentenceTransformerCrossEncoder,
) -> None:
    # Concurrent calls in each loop: a lock bound to the first loop fails in the second.
    assert asyncio.run(three(ce)) == asyncio.run(three(ce)) == [[1.0, 2.0]] * 3
    assert ce._ce.most_running == 1


def test_the_cross_encoder_runs_one_batch_at_a_time_across_threads(
    ce: SentenceTransformerCrossEncoder,
) -> None:
    results: list[list[list[float]]] = []
    threads = [
        threading.Thread(target=lambda: results.append(asyncio.run(three(ce))), daemon=True)
        for _ in range(2)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
    assert not any(th.is_alive() for th in threads), "a caller never got the model"
    assert results == [[[1.0, 2.0]] * 3] * 2
    assert ce._ce.most_running == 1  # the model was never entered twice at once
