"""What a search asks the store for and gets back: scopes, the time view, scored items."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from kg.schemas.graph import CommunityNode, EntityNode, EpisodicNode, Fact
from kg.schemas.validation import UtcDatetime


class Scope(StrEnum):
    """The layer a search branch looks in."""

    facts = "facts"
    entities = "entities"
    episodes = "episodes"
    communities = "communities"


class SearchView(BaseModel):
    """The bi-temporal window every branch filters on *before* ranking.

    Facts: true at `valid_at` and believed at `known_at`; with a `window` (a time expression
    of the query, `kg.retrieval.when`), valid at some time in [start, end) instead, closed
    versions included (the caller marks them closed); with `include_history`, every
    version believed at `known_at` whatever its valid interval (closed facts included, and
    marked closed by the caller). Contested facts only with `include_contested`. Entities and
    communities: created by `known_at`. Episodes: ingested (not rolled back or failed), created
    by `known_at` and, unless `include_history`, with a reference time no later than `valid_at`.
    """

    model_config = ConfigDict(frozen=True)

    valid_at: UtcDatetime
    known_at: UtcDatetime
    include_history: bool = False
    include_contested: bool = False
    window: tuple[UtcDatetime | None, UtcDatetime | None] | None = None


SearchItem = Fact | EntityNode | EpisodicNode | CommunityNode


@dataclass(frozen=True)
class Scored:
    """One store hit: the item and the branch's own score (higher is better)."""

    uuid: str
    score: float
    item: SearchItem
