"""Interval logic: where a new fact lands on its timeline, and what it closes.

A timeline is the set of live, active versions that compete for the same valid time:
(subject, predicate) for a single-valued predicate, (subject, predicate, object) for a
multi-valued one. Within a timeline, versions never overlap:

- a fact that restates a version holding at its valid time reinforces that version;
- a different value closes the version holding at its valid time (single-valued only), so a
  late-arriving older fact closes the *historical* version it lands in, never the current one;
- the new version ends where the next version on the timeline starts, unless it ends earlier;
- a lower trust tier may not close a higher one: its fact is stored as `contested` instead;
- a statement that outranks a contested claim and covers the claim's start answers it: the
  claim is retired (no longer kept for review), whatever the statement says. Agreeing, the
  value is now believed at the statement's own trust; disagreeing, the claim is rejected.
  This is how a person's review decision (a user-channel episode) settles a claim, so
  rolling that episode back puts the claim back under review.

Closing never edits a stored version: it is retired and a copy with the new end is created
(see `kg.schemas.graph.FactEdge`). All of this is pure: the caller supplies ids and the clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from kg.schemas.graph import EdgeStatus, FactEdge
from kg.schemas.plan import EdgeReinforcement, EdgeRetirement, PlanSummary
from kg.schemas.store import TimelineKey

SUPERSEDED = "superseded: a new value of a single-valued predicate"
ENDED = "ended: an episode stated when it stopped being true, or contradicted it"


@dataclass(frozen=True)
class NewFact:
    source_uuid: str
    target_uuid: str
    predicate: str
    single_valued: bool
    fact: str
    valid_at: datetime
    invalid_at: datetime | None

    @property
    def key(self) -> TimelineKey:
        return TimelineKey(
            source_uuid=self.source_uuid,
            predicate=self.predicate,
            target_uuid=None if self.single_valued else self.target_uuid,
        )


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
        self._settle(f)
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
        # The new value lasts until the next start on the timeline: another version, or a
        # later restatement of the value it interrupts.
        later_starts = [v.valid_at for v in timeline if v.valid_at > f.valid_at]
        later_starts += [r for v in holding for r in _restated_after(v, f.valid_at)]
        ends = [t for t in (f.invalid_at, min(later_starts, default=None)) if t is not None]
        created = self._create(f, min(ends, default=None), EdgeStatus.active)
        for v in holding:
            self._close(v, f.valid_at, created.uuid, SUPERSEDED)

    def _settle(self, f: NewFact) -> None:
        """Retire the contested claims on `f`'s timeline that `f` outranks and that start
        within `f`'s interval: the higher-trust word on that time answers them."""
        for c in list(self.live.values()):
            if (
                c.status is EdgeStatus.contested
                and c.uuid not in self.new_edges
                and c.source_node_uuid == f.source_uuid
                and c.name == f.predicate
                and (f.single_valued or c.target_node_uuid == f.target_uuid)
                and c.trust < self.trust
                and f.valid_at <= c.valid_at
                and (f.invalid_at is None or f.invalid_at > c.valid_at)
            ):
                self.retirements.append(EdgeRetirement(uuid=c.uuid, expired_at=self.now))
                del self.live[c.uuid]
                self.summary.edges_closed.append(c.uuid)

    def _restate(self, v: FactEdge, f: NewFact) -> None:
        self._reinforce(v, f.valid_at)
        ends_open_fact = f.invalid_at is not None and v.invalid_at is None
        if not ends_open_fact:
            return
        if v.trust > self.trust:
            self._create(f, f.invalid_at, EdgeStatus.contested)
        else:
            assert f.invalid_at is not None
            self._close(v, f.invalid_at, None, ENDED)

    def _reinforce(self, v: FactEdge, valid_at: datetime) -> None:
        if self.episode_uuid in v.episodes:
            return
        v.episodes.append(self.episode_uuid)
        v.episode_valid_at.append(valid_at)
        if v.uuid not in self.new_edges:
            self.reinforcements.append(
                EdgeReinforcement(uuid=v.uuid, episode_uuid=self.episode_uuid, valid_at=valid_at)
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
                "episode_valid_at": [f.valid_at],
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

    def _close(self, v: FactEdge, at: datetime, by_edge: str | None, reason: str) -> None:
        """End `v` at `at`. Support asserted after `at` resumes the fact in a continuation."""
        self.summary.facts_closed += 1
        support = _support(v)
        before = [(ep, va) for ep, va in support if va <= at]
        after = [(ep, va) for ep, va in support if va > at]
        closure = {
            "invalid_at": at,
            "invalidated_by": self.episode_uuid,
            "invalidated_edge": by_edge,
            "invalidation_reason": reason,
            "episodes": [ep for ep, _ in before],
            "episode_valid_at": [va for _, va in before],
        }
        if v.uuid in self.new_edges:
            # Written by this same episode: not stored yet, so there is no belief to retire.
            original = v.model_copy()
            for key, value in closure.items():
                setattr(v, key, value)
        else:
            original = v
            self.retirements.append(EdgeRetirement(uuid=v.uuid, expired_at=self.now))
            del self.live[v.uuid]
            self._add_version(v.model_copy(update={**closure, "supersedes": v.uuid}))
            self.summary.edges_closed.append(v.uuid)
        if after:
            self._add_version(
                original.model_copy(
                    update={
                        "valid_at": min(va for _, va in after),
                        "invalid_at": original.invalid_at,
                        "episodes": [ep for ep, _ in after],
                        "episode_valid_at": [va for _, va in after],
                        "invalidated_by": None,
                        "invalidated_edge": None,
                        "invalidation_reason": None,
                        "supersedes": original.supersedes if v.uuid in self.new_edges else v.uuid,
                    }
                )
            )

    def _add_version(self, edge: FactEdge) -> None:
        copy = edge.model_copy(
            update={"uuid": self.new_id(), "created_at": self.now, "expired_at": None}
        )
        self.new_edges[copy.uuid] = copy
        self.live[copy.uuid] = copy


def _support(v: FactEdge) -> list[tuple[str, datetime]]:
    """(episode, asserted valid time) pairs; graphs written without them count as the start."""
    if len(v.episode_valid_at) == len(v.episodes):
        return list(zip(v.episodes, v.episode_valid_at, strict=True))
    return [(ep, v.valid_at) for ep in v.episodes]


def _restated_after(v: FactEdge, at: datetime) -> list[datetime]:
    return [va for _, va in _support(v) if va > at]
