"""Interval logic: where a new fact lands on its timeline, and what it closes.

A timeline is the set of live, active versions that compete for the same valid time:
(subject, predicate) for a single-valued predicate, (subject, predicate, object) for a
multi-valued one. Within a timeline, versions never overlap:

- a fact that restates a version holding at its valid time reinforces that version;
- a different value closes the version holding at its valid time (single-valued only), so a
  late-arriving older fact closes the *historical* version it lands in, never the current one;
- the new version ends where the next version on the timeline starts, unless it ends earlier;
- a lower trust tier may not close a higher one: its fact is stored as `contested` instead.

Closing never edits a stored version: it is retired and a copy with the new end is created
(see `schemas.graph.FactEdge`). All of this is pure: the caller supplies ids and the clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from schemas.graph import EdgeStatus, FactEdge
from schemas.plan import EdgeReinforcement, EdgeRetirement, PlanSummary


@dataclass(frozen=True)
class NewFact:
    source_uuid: str
    target_uuid: str
    predicate: str
    single_valued: bool
    fact: str
    valid_at: datetime
    invalid_at: datetime | None


@dataclass
class TimelineWriter:
    """Accumulates the edge operations of one episode against the live versions it read."""

    episode_uuid: str
    now: datetime
    channel: str
    trust: int
    extractor: str
    group_id: str
    new_id: Callable[[], str]
    live: dict[str, FactEdge]
    new_edges: dict[str, FactEdge] = field(default_factory=dict)
    retirements: list[EdgeRetirement] = field(default_factory=list)
    reinforcements: list[EdgeReinforcement] = field(default_factory=list)
    summary: PlanSummary = field(default_factory=PlanSummary)

    def add(self, f: NewFact) -> None:
        timeline = [
            v
            for v in self.live.values()
            if v.source_node_uuid == f.source_uuid
            and v.name == f.predicate
            and v.status is EdgeStatus.active
            and (f.single_valued or v.target_node_uuid == f.target_uuid)
        ]
        holding = [v for v in timeline if v.holds_at(f.valid_at)]
        same = [v for v in holding if v.target_node_uuid == f.target_uuid]
        if same:
            self._restate(same[0], f)
            return
        # Only single-valued timelines can hold a different object here.
        if any(v.trust > self.trust for v in holding):
            self._create(f, f.invalid_at, EdgeStatus.contested)
            return
        later_starts = [v.valid_at for v in timeline if v.valid_at > f.valid_at]
        ends = [t for t in (f.invalid_at, min(later_starts, default=None)) if t is not None]
        created = self._create(f, min(ends, default=None), EdgeStatus.active)
        for v in holding:
            self._close(v, f.valid_at, created.uuid)

    def _restate(self, v: FactEdge, f: NewFact) -> None:
        self._reinforce(v)
        ends_open_fact = f.invalid_at is not None and v.invalid_at is None
        if not ends_open_fact:
            return
        if v.trust > self.trust:
            self._create(f, f.invalid_at, EdgeStatus.contested)
        else:
            assert f.invalid_at is not None
            self._close(v, f.invalid_at, None)

    def _reinforce(self, v: FactEdge) -> None:
        if self.episode_uuid in v.episodes:
            return
        v.episodes.append(self.episode_uuid)
        if v.uuid not in self.new_edges:
            self.reinforcements.append(
                EdgeReinforcement(uuid=v.uuid, episode_uuid=self.episode_uuid)
            )
        self.summary.facts_reinforced += 1

    def _create(self, f: NewFact, invalid_at: datetime | None, status: EdgeStatus) -> FactEdge:
        uuid = self.new_id()
        edge = FactEdge.model_validate(
            {
                "uuid": uuid,
                "fact_uuid": uuid,
                "group_id": self.group_id,
                "source_node_uuid": f.source_uuid,
                "target_node_uuid": f.target_uuid,
                "name": f.predicate,
                "fact": f.fact,
                "episodes": [self.episode_uuid],
                "valid_at": f.valid_at,
                "invalid_at": invalid_at,
                "created_at": self.now,
                "channel": self.channel,
                "trust": self.trust,
                "extractor": self.extractor,
                "status": status,
            }
        )
        self.new_edges[uuid] = edge
        self.live[uuid] = edge
        self.summary.edges_added.append(uuid)
        if status is EdgeStatus.contested:
            self.summary.facts_contested += 1
        else:
            self.summary.facts_added += 1
        return edge

    def _close(self, v: FactEdge, at: datetime, by_edge: str | None) -> None:
        closure = {"invalid_at": at, "invalidated_by": self.episode_uuid, "invalidated_edge": by_edge}
        self.summary.facts_closed += 1
        if v.uuid in self.new_edges:
            # Written by this same episode: not stored yet, so there is no belief to retire.
            for key, value in closure.items():
                setattr(v, key, value)
            return
        self.retirements.append(EdgeRetirement(uuid=v.uuid, expired_at=self.now))
        del self.live[v.uuid]
        copy = v.model_copy(
            update={
                "uuid": self.new_id(),
                "created_at": self.now,
                "expired_at": None,
                "supersedes": v.uuid,
                "episodes": list(v.episodes),
                **closure,
            }
        )
        self.new_edges[copy.uuid] = copy
        self.live[copy.uuid] = copy
        self.summary.edges_closed.append(v.uuid)
