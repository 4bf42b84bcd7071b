"""A LangChain retriever (`langchain_core.retrievers.BaseRetriever`) over kg's search.

`invoke(query)` is kg's hybrid search (BM25, cosine, graph; a named `recipe` if given) in
the wrapped memory's group, at the current time unless `valid_at` / `known_at` say
otherwise; each hit is a `Document`: the fact's sentence (or the episode's text, the
entity's or community's summary) as `page_content`, kg's own fields (`kind`, `id`,
`score`, `subject`, `predicate`, `object`, `valid_from`, ...) as `metadata`, best first.
`k` (default 4) is the number of documents; it can also be given to `invoke`.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from kg.adapters.memory import hits_of, runner_for
from kg.schemas.views import HitView


def document(hit: HitView) -> Document:
    metadata = hit.model_dump(mode="json", exclude_none=True, exclude={"text"})
    return Document(page_content=hit.text, metadata=metadata, id=hit.id)


class KGRetriever(BaseRetriever):
    """Documents from kg's search of a `KG` or an `AsyncClient` (`memory`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Any
    k: int = 4
    group_id: str | None = None
    recipe: str | None = None
    valid_at: str | None = None
    known_at: str | None = None

    async def _search(self, query: str, k: int | None) -> list[Document]:
        options = {
            "group_id": self.group_id,
            "recipe": self.recipe,
            "valid_at": self.valid_at,
            "known_at": self.known_at,
        }
        given = {name: value for name, value in options.items() if value is not None}
        limit = k if k is not None else self.k
        answer = await self.memory.search(query, limit=limit, **given)
        return [document(hit) for hit in hits_of(answer)[:limit]]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return runner_for(self.memory).run(self._search(query, k))

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
    ) -> list[Document]:
        return await self._search(query, k)
