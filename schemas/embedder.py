"""The embedder contract: ingest writes embeddings with it, retrieval embeds queries with it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Embedder(Protocol):
    """Returns L2-normalised vectors, so cosine similarity is a dot product everywhere."""

    model: str
    dim: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...
