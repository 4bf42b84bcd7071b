"""Answers of the `KG` API that are plain data, kept below the facade so that the HTTP client
(`kg.client`) returns the same models as `KG` without importing the engine."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from kg.schemas.episode import Channel
from kg.schemas.graph import EpisodicNode, Fact, Quarantined

__all__ = ["Explanation", "QuarantineEntry"]


class QuarantineEntry(BaseModel):
    """One quarantined fact or passage, with the episode it came in (see `KG.quarantine`)."""

    episode_uuid: str
    created_at: datetime
    channel: Channel
    source_description: str
    item: Quarantined


class Explanation(BaseModel):
    """Every version of a fact and the episodes that created, reinforced and closed it."""

    versions: list[Fact]
    episodes: list[EpisodicNode]
