"""A LlamaIndex retriever (`llama_index.core.retrievers.BaseRetriever`) over kg's search.

`retrieve(query)` is kg's hybrid search in the wrapped memory's group; each hit is a
`NodeWithScore` holding a `TextNode`: the fact's sentence (or the episode's text, the
entity's or community's summary) as text, kg's fields (`kind`, `subject`, `predicate`,
`object`, `valid_from`, ...) as metadata, kg's score as its score, best first. Usable as any
LlamaIndex retriever (`RetrieverQueryEngine`, a `RetrieverTool`, ...).
"""

from __future__ import annotations

from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from kg.adapters.memory import Memory, hits_of, runner_for
from kg.schemas.views import HitView


def node(hit: HitView) -> NodeWithScore:
    metadata = hit.model_dump(mode="json", exclude_none=True, exclude={"text", "id", "score"})
    return NodeWithScore(
        node=TextNode(id_=hit.id, text=hit.text, metadata=metadata), score=hit.score
    )


class KGRetriever(BaseRetriever):
    """Nodes from kg's search of a `KG` or an `AsyncClient` (`memory`): `top_k` of them."""

    def __init__(
        self,
        memory: Memory,
        *,
        top_k: int = 4,
        group_id: str | None = None,
        recipe: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.memory = memory
        self.top_k = top_k
        given = {"group_id": group_id, "recipe": recipe}
        self.given = {name: value for name, value in given.items() if value is not None}

    async def _search(self, query: str) -> list[NodeWithScore]:
        answer = await self.memory.search(query, limit=self.top_k, **self.given)
        return [node(hit) for hit in hits_of(answer)[: self.top_k]]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return runner_for(self.memory).run(self._search(query_bundle.query_str))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await self._search(query_bundle.query_str)
