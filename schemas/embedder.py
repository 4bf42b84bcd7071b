"""The embedder contract: ingest writes embeddings with it, retrieval embeds queries with it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel


class Embedder(Protocol):
    """Returns L2-normalised vectors, so cosine similarity is a dot product everywhere."""

    model: str
    dim: int

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class EmbeddingModel(BaseModel):
    """Which model embedded a group: recorded with the group's first embedded write, so
    later opens can pick the same model and refuse another (vectors of two models do not
    compare)."""

    model: str
    dim: int

    @classmethod
    def of(cls, embedder: Embedder) -> EmbeddingModel:
        return cls(model=embedder.model, dim=embedder.dim)

    def __str__(self) -> str:
        return f"{self.model} ({self.dim} dimensions)"
