"""/v1/facts and /v1/history: the facts of a view, every version, why a fact is believed,
and "that changed"."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from kg.facade import EpisodeResult
from kg.schemas.graph import Fact
from kg.schemas.views import FactView, fact_view
from kg.server.models import Correction, FactsPage, HistoryPage, WhyResponse
from kg.server.openapi import problems
from kg.server.pages import Page, mapped
from kg.server.routes.deps import Caller
from kg.server.routes.episodes import LOCATION, located

router = APIRouter(prefix="/v1", tags=["facts"])
FactId = Annotated[str, Path(max_length=200)]


def view(fact: Fact) -> FactView:
    """A fact version in the one fact shape."""
    return fact_view(fact)


@router.get("/facts", responses=problems())
async def list_facts(c: Caller, q: Annotated[FactsPage, Query()]) -> Page[FactView]:
    """What was true at `valid_at`, as kg knew it at `known_at` (both default to the time
    the first page was read, which every later page keeps)."""
    return mapped(await c.fact_page(q, limit=q.limit, cursor=q.cursor), view)


@router.get("/history", responses=problems())
async def list_history(c: Caller, q: Annotated[HistoryPage, Query()]) -> Page[FactView]:
    """Every version of the matching facts, closed ones included, with provenance."""
    return mapped(await c.history_page(q, limit=q.limit, cursor=q.cursor), view)


@router.get("/facts/{fact_id}/why", responses=problems(404))
async def explain_fact(c: Caller, fact_id: FactId) -> WhyResponse:
    """A fact's versions, the episodes that created, reinforced and closed it, and what
    each supporting episode said about it."""
    return await c.why_said(fact_id)


@router.post(
    "/facts/{fact_id}/correct",
    status_code=201,
    responses={201: {"headers": LOCATION}, **problems(404, body=True)},
)
async def correct_fact(
    c: Caller, fact_id: FactId, body: Correction, response: Response
) -> EpisodeResult:
    """'That changed' (role write): the right value and since when, stored as a
    structured episode on the key's channel that closes the old value through the
    timeline rules when the key's trust reaches it (never an overwrite; rollback undoes
    it). 201 with the correction episode's `Location`."""
    return located(response, await c.correct(fact_id, body))
