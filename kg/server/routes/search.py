"""/v1/search, /v1/context and /v1/entities: finding things, and the prompt block."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from kg.server.models import (
    ContextRequest,
    ContextResponse,
    EntitiesPage,
    EntityRow,
    SearchRequest,
    SearchResponse,
)
from kg.server.openapi import problems
from kg.server.pages import Page, mapped
from kg.server.routes.deps import Caller

router = APIRouter(prefix="/v1", tags=["search"])


@router.post("/search", responses=problems(body=True))
async def search(c: Caller, body: SearchRequest) -> SearchResponse:
    """Hybrid search in any time view: the hits of every scope, best first, in the one hit
    shape (ids included: a fact's goes to /v1/facts/{id}/why). The answer's `rankings` and
    `branches` are the CLI's --explain; `include_closed` adds closed facts, marked."""
    return SearchResponse.of(await c.search(body))


@router.post("/context", responses=problems(body=True))
async def get_context(c: Caller, body: ContextRequest) -> ContextResponse:
    """Search, rendered as a quoted-data block for a prompt within `max_tokens`."""
    return ContextResponse(context=await c.context(body))


@router.get("/entities", responses=problems())
async def list_entities(c: Caller, q: Annotated[EntitiesPage, Query()]) -> Page[EntityRow]:
    """Entities whose name contains `contains`, those with the most fact versions first:
    what to pick a subject from."""
    page = await c.entity_page(contains=q.contains, limit=q.limit, cursor=q.cursor)
    return mapped(page, EntityRow.of)
