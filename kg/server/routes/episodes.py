"""/v1/episodes: add one (201 written, 202 queued, 200 already stored; `Location` names
it), page through them, read one, retry a failed one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from kg.facade import EpisodeResult
from kg.server.models import AddEpisode, EpisodeDetail, EpisodeRow, EpisodesPage
from kg.server.openapi import problems
from kg.server.pages import Page, mapped
from kg.server.routes.deps import Caller

router = APIRouter(prefix="/v1/episodes", tags=["episodes"])
EpisodeId = Annotated[str, Path(max_length=200)]
LOCATION = {
    "Location": {"description": "The episode: GET it for its status.", "schema": {"type": "string"}}
}
STATUS = {"added": 201, "queued": 202, "duplicate": 200}


def located(response: Response, result: EpisodeResult) -> EpisodeResult:
    """The status an episode's answer takes from what happened to it, and where it is."""
    response.status_code = STATUS[result.status]
    response.headers["Location"] = f"/v1/episodes/{result.episode_uuid}"
    return result


def created(*extra: int) -> dict[int | str, Any]:
    """The answers of a route that stores an episode: 201, 200 for one already stored."""
    out: dict[int | str, Any] = {
        201: {"description": "Written: in the graph.", "headers": LOCATION},
        200: {
            "description": "Already stored (same content): nothing written.",
            "model": EpisodeResult,
            "headers": LOCATION,
        },
    }
    return {**out, **problems(*extra, body=True)}


@router.post(
    "",
    status_code=201,
    responses={
        **created(502),
        202: {
            "description": "Queued (wait: false, extraction to come): searchable now; "
            "the background worker writes its facts.",
            "model": EpisodeResult,
            "headers": LOCATION,
        },
    },
)
async def add_episode(c: Caller, body: AddEpisode, response: Response) -> EpisodeResult:
    """Add one episode (role write), on the key's channel unless the body names a lower
    one (a higher trust than the key's is a 403). 201 once it is in the graph; 200 with
    `status: duplicate` when the group already has it (a no-op). A failed extraction is a
    502, recorded as a failed episode that re-sending retries. With `wait: false` it
    answers at once, 202 with `status: queued`: searchable now, written in order by the
    server's background worker; text with nothing to extract (`extract: false`, or no LLM
    on the server) is stored at once instead (201, `added`). `Location` is the episode:
    GET it for its status."""
    return located(response, await c.add(body))


@router.get("", responses=problems())
async def list_episodes(c: Caller, q: Annotated[EpisodesPage, Query()]) -> Page[EpisodeRow]:
    """The latest episodes, newest first, whatever their status (ingested, queued, failed
    with its error, rolled back), a page at a time: `next_cursor` fetches the next page."""
    page = await c.episodes(limit=q.limit, cursor=q.cursor)
    return mapped(page, EpisodeRow.of)


@router.get("/{episode_id}", responses=problems(404))
async def get_episode(c: Caller, episode_id: EpisodeId) -> EpisodeDetail:
    """One episode of this group, with its content, status and metrics."""
    return EpisodeDetail.of(await c.episode(episode_id))


@router.post("/{episode_id}/retry", responses=problems(404, 502, write=True))
async def retry_episode(c: Caller, episode_id: EpisodeId) -> EpisodeResult:
    """Extract a failed episode again (role write); 502 if it fails again (still
    recorded as failed), 422 if the episode did not fail."""
    return await c.retry(episode_id)
