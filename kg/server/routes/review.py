"""/v1/review: what kg holds back rather than believes (contested claims, quarantined
items), each with why, and a person's decision on one, stored as a user-channel episode."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from kg.facade import EpisodeResult
from kg.review import ReviewItem
from kg.server.models import Decision
from kg.server.openapi import problems
from kg.server.pages import Page
from kg.server.routes.deps import Caller, Cursor, PageLimit
from kg.server.routes.episodes import LOCATION, located

router = APIRouter(prefix="/v1/review", tags=["review"])
ItemId = Annotated[str, Path(max_length=300)]


@router.get("", responses=problems())
async def list_review(c: Caller, limit: PageLimit = 100, cursor: Cursor = None) -> Page[ReviewItem]:
    """Contested claims (newest first), then quarantined items not yet decided: each with
    the episode it came in, what that episode said, what kg believes instead, and the rule
    that held it back."""
    return await c.review(limit=limit, cursor=cursor)


@router.post(
    "/{item_id}/decision",
    status_code=201,
    responses={201: {"headers": LOCATION}, **problems(404, body=True)},
)
async def decide_review(
    c: Caller, item_id: ItemId, body: Decision, response: Response
) -> EpisodeResult:
    """Accept, reject or edit a review item (role write, a user-channel key): stored as a
    user-channel episode through the timeline rules, so it is provenance and rolling that
    episode back puts the item back under review. 201 with the episode's `Location`."""
    return located(response, await c.decide(item_id, body))
