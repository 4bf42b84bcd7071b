"""Search preparation: a validated `SearchRequest` and a group become one retrieval run.

`KG.search` and `KG.context` (and through them the CLI, HTTP and MCP) hand a `Searcher` the
request; it fixes the time view, looks up the entity names, checks the group's embedding
model and makes sure an existing group has its vector indexes, then runs kg.retrieval.
"""

from __future__ import annotations

from kg.errors import InputError, check_group
from kg.ingest import name_key
from kg.retrieval import CrossEncoder, SearchError, SearchResults
from kg.retrieval import search as run_search
from kg.retrieval.request import SearchRequest
from kg.schemas.ontology import Ontology
from kg.schemas.search import SearchView
from kg.schemas.store import GraphStore
from kg.times import TransactionClock
from kg.tracing import Attributes, traced
from kg.vectors import Vectors


class Searcher:
    def __init__(
        self,
        store: GraphStore,
        *,
        vectors: Vectors,
        ontology: Ontology,
        clock: TransactionClock,
        cross_encoder: CrossEncoder | None = None,
    ) -> None:
        self.store = store
        self.vectors = vectors
        self.ontology = ontology
        self.clock = clock
        self.cross_encoder = cross_encoder
        self._searchable: set[str] = set()  # groups whose vector indexes were made sure of

    @traced(
        "kg.search",
        lambda _, group_id, request: _search_attributes(group_id, request),
        lambda r: _hit_attributes(r),
    )
    async def search(self, group_id: str, request: SearchRequest) -> SearchResults:
        check_group(group_id)
        config = request.search_config()
        now = self.clock.now()
        view = SearchView(
            valid_at=request.valid_at or now,
            known_at=request.known_at or now,
            include_history=request.include_closed,
            include_contested=request.include_contested,
        )
        center = request.center
        center_uuid = (await self.entity_uuids(group_id, [center]))[0] if center else None
        seed_uuids = await self.entity_uuids(group_id, request.seeds)
        # The group's own model first: its mismatch is the more precise error than a store
        # whose vector indexes have another dimension (one Neo4j database, many groups).
        embedder = await self.vectors.embedder_for(group_id)
        await self._search_schema(group_id)
        try:
            return await run_search(
                self.store,
                group_id,
                request.query,
                config,
                view,
                embedder=embedder,
                cross_encoder=self.cross_encoder,
                center=center_uuid,
                seeds=seed_uuids,
                asked_at=request.asked_at,
                ontology=self.ontology,
            )
        except SearchError as exc:
            raise InputError(str(exc)) from None

    async def entity_uuids(self, group_id: str, names: list[str]) -> list[str]:
        """The entities named, by key, or an InputError naming the first one missing."""
        if not names:
            return []
        found = {
            e.name_key: e.uuid
            for e in await self.store.entities_by_key(group_id, [name_key(n) for n in names])
        }
        missing = [n for n in names if name_key(n) not in found]
        if missing:
            raise InputError(f"no entity named {missing[0]!r} in group {group_id!r}")
        return [found[name_key(n)] for n in names]

    async def _search_schema(self, group_id: str) -> None:
        """An existing group opened with a new embedder gets its vector indexes before the
        first search, not only at the next write."""
        if group_id in self._searchable:
            return
        if await self.store.has_group(group_id):
            await self.store.ensure_schema(group_id)
            self._searchable.add(group_id)


def _search_attributes(group_id: str, request: SearchRequest) -> Attributes:
    """A `kg.search` span's attributes: the group and recipe, never the query."""
    return {"kg.group_id": group_id, "kg.search.recipe": request.recipe or "default"}


def _hit_attributes(r: SearchResults) -> Attributes:
    return {
        "kg.hits.facts": len(r.facts),
        "kg.hits.episodes": len(r.episodes),
        "kg.hits.entities": len(r.entities),
        "kg.search.latency_ms": r.latency_ms,
    }
