"""Replay structured episodes onto empty timelines, at their original transaction times.

Used by rollback: the timelines an episode touched are rebuilt from every *other* episode that
touched them, so the result equals never having ingested it, at every valid time and every
transaction time. Pure: the caller reads the episodes and entities and writes the result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from kg.ingest.structured import new_uuid
from kg.ingest.timeline import NewFact, TimelineWriter
from kg.schemas.graph import FactEdge
from kg.schemas.store import TimelineKey


@dataclass(frozen=True)
class ReplayEpisode:
    uuid: str
    created_at: datetime
    channel: str
    trust: int
    extractor: str
    facts: list[NewFact]


def replay_timelines(
    group_id: str,
    episodes: Iterable[ReplayEpisode],
    keys: set[TimelineKey],
    new_id: Callable[[], str] = new_uuid,
) -> list[FactEdge]:
    """Every version the episodes produce on `keys`, retired ones included."""
    versions: dict[str, FactEdge] = {}
    live: dict[str, FactEdge] = {}
    for ep in sorted(episodes, key=lambda e: (e.created_at, e.uuid)):
        facts = [f for f in ep.facts if f.key in keys]
        if not facts:
            continue
        writer = TimelineWriter(
            episode_uuid=ep.uuid,
            now=ep.created_at,
            channel=ep.channel,
            trust=ep.trust,
            extractor=ep.extractor,
            group_id=group_id,
            new_id=new_id,
            live=live,
        )
        for f in facts:
            writer.add(f)
        versions.update(writer.new_edges)
        for r in writer.retirements:
            versions[r.uuid].expired_at = r.expired_at
    return list(versions.values())
