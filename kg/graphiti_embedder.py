"""A kg embedder behind graphiti-core's embedder interface (needs graphiti-core).

Graphiti and kg share the embedding properties of a graph, so running both on one graph only
works if both write the same vectors: hand Graphiti `GraphitiEmbedder(local_minilm())` and a
graph it writes carries the unit-length vectors kg's cosine search expects.
"""

from __future__ import annotations

from collections.abc import Iterable

from kg.schemas.embedder import Embedder

try:
    from graphiti_core.embedder.client import EmbedderClient
except ImportError as exc:
    raise ImportError("kg.graphiti_embedder needs graphiti-core: pip install 'kg[bench]'") from exc


class GraphitiEmbedder(EmbedderClient):
    """graphiti-core's `EmbedderClient` over a kg `Embedder`."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    async def create(
        self, input_data: str | list[str] | Iterable[int] | Iterable[Iterable[int]]
    ) -> list[float]:
        """The vector of one text; Graphiti passes it alone or as a one-item list."""
        text = input_data if isinstance(input_data, str) else next(iter(input_data), None)
        if not isinstance(text, str):
            raise TypeError(f"GraphitiEmbedder embeds text, got {type(text).__name__}")
        return (await self.embedder.embed([text]))[0]

    async def create_batch(self, input_data_list: list[str]) -> list[list[float]]:
        return await self.embedder.embed(input_data_list)
