"""What the MCP tools return: structured content with a published output schema, built from
the one JSON shape every surface shares (kg.schemas.views), so each fact, episode and hit
carries the id the next tool takes (`why`, `get_fact`, `rollback_episode`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kg.erasure import ErasureReceipt
from kg.retrieval.context import WITHHELD
from kg.rollback import RollbackReport
from kg.schemas.graph import EpisodicNode, Fact
from kg.schemas.views import EpisodeView, FactView, HitView, Page, episode_view, fact_view

QUOTE_CHARS = 500  # of an episode's text, quoted by `why` and in search hits

__all__ = [
    "AddMemoryResult",
    "EpisodePage",
    "FactPage",
    "ForgetResult",
    "Hits",
    "RollbackResult",
    "SearchMemoryResult",
    "SourceEpisode",
    "WhyResult",
    "shown",
    "source_episode",
]

FactPage = Page[FactView]
EpisodePage = Page[EpisodeView]


class Noted(BaseModel):
    notes: list[str] = Field(
        default_factory=list,
        description="Deprecation notes: an argument name this call used that will go; use "
        "the name given instead.",
    )


class AddMemoryResult(BaseModel):
    episode_id: str = Field(description="The episode's id: rollback_episode takes it.")
    status: Literal["added", "duplicate", "queued"] = Field(
        description="added: in the graph now; duplicate: memory already had this episode; "
        "queued: stored and searchable as text, its facts written shortly by the server."
    )
    facts_added: int = 0
    facts_reinforced: int = Field(default=0, description="Stored facts it restated.")
    facts_closed: int = Field(default=0, description="Facts it ended (a new single value).")
    facts_contested: int = Field(
        default=0, description="Facts it tried to close at a lower trust: kept for review."
    )
    entities_added: int = 0


class Hits(BaseModel):
    hits: list[HitView] = Field(
        description="Best first. A fact hit's id goes to why or get_fact; its episode_id and "
        "closed_by_episode_id to rollback_episode."
    )


class SearchMemoryResult(Hits, Noted):
    pass


class SourceEpisode(EpisodeView):
    source_description: str = Field(description="Where it came from, e.g. a URL.")
    quote: str = Field(description=f"The start of its text (at most {QUOTE_CHARS} characters).")


class WhyResult(BaseModel):
    fact: FactView = Field(description="The fact as memory believes it now (latest version).")
    versions: list[FactView] = Field(description="Every version, oldest first.")
    episodes: list[SourceEpisode] = Field(
        description="The episodes that stated, restated or closed it."
    )


class ForgetResult(ErasureReceipt, Noted):
    pass


class RollbackResult(RollbackReport, Noted):
    pass


def shown(episode: EpisodicNode) -> str:
    """An episode's text, cut to QUOTE_CHARS, with the passages the instruction guard
    quarantined withheld (as the context block does)."""
    text = episode.content
    for q in episode.quarantined():
        if q.kind == "passage" and q.text:
            text = text.replace(q.text, WITHHELD.format(reason=q.reason))
    return text[:QUOTE_CHARS]


def source_episode(episode: EpisodicNode) -> SourceEpisode:
    return SourceEpisode(
        **episode_view(episode).model_dump(),
        source_description=episode.source_description,
        quote=shown(episode),
    )


def latest(versions: list[Fact]) -> FactView:
    """The version memory believes now (the newest of those not retired), else the newest."""
    believed = [v for v in versions if v.edge.expired_at is None] or versions
    return fact_view(max(believed, key=lambda v: v.edge.created_at))
