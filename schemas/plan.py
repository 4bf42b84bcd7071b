"""A write plan: everything one episode changes, computed before anything is written.

The store applies a plan atomically, so an episode is either fully in the graph or not at all.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from kg.schemas.graph import (
    AuditEvent,
    CommunityNode,
    EntityNode,
    EpisodicNode,
    FactEdge,
    Quarantined,
)
from kg.schemas.metrics import Counters, GraphCounters
from kg.schemas.validation import UtcDatetime


class GroupVersion(BaseModel):
    """Where a group's write history stood when a plan's reads began.

    Every write to a group replaces `token` inside its own atomic write, so a plan computed
    from reads made at one token is written only if the token is still current; otherwise
    nothing is written and the planner reads again (see docs/design-decisions.md, "Many
    writers, one server").
    """

    model_config = ConfigDict(frozen=True)

    token: str | None = Field(
        default=None, description="None: nothing written yet (a new or erased group)."
    )
    writes: int = Field(default=0, description="Writes to the group so far (informative).")
    last_tx: UtcDatetime | None = Field(
        default=None,
        description="The latest transaction time written: the next plan's "
        "transaction time must come after it, whichever process writes it.",
    )
    hold: str | None = Field(
        default=None,
        description="Set while one operation writes the group in several "
        "steps (an import): other writers wait for it to finish.",
    )


BASE_FIELD = Field(
    default=None,
    description="The group version the plan was computed at: the write is refused, with "
    "nothing written, if the group has changed since. None writes unconditionally.",
)


class EdgeRetirement(BaseModel):
    """Set `expired_at` on a stored version: the system stops believing that interval."""

    uuid: str
    expired_at: UtcDatetime


class EdgeReinforcement(BaseModel):
    """Another episode supports a stored version: append it to `episodes`."""

    uuid: str
    episode_uuid: str
    valid_at: UtcDatetime = Field(description="The valid time the episode asserted it at.")


class WritePlan(BaseModel):
    group_id: str
    base: GroupVersion | None = BASE_FIELD
    episode: EpisodicNode
    replaces_failed: str | None = Field(
        default=None, description="A failed attempt at the same episode, deleted by this plan."
    )
    lease_owner: str | None = Field(
        default=None,
        description="The episode is a queued one this worker holds: the plan "
        "completes the stored node in place, and writes nothing unless the lease is still held.",
    )
    new_entities: list[EntityNode] = Field(default_factory=list)
    mentions: list[str] = Field(default_factory=list, description="Entity uuids the episode names.")
    new_edges: list[FactEdge] = Field(default_factory=list)
    retirements: list[EdgeRetirement] = Field(default_factory=list)
    reinforcements: list[EdgeReinforcement] = Field(default_factory=list)


class EpisodeKey(BaseModel):
    """An episode's search key rebuilt (kg.search_keys): text, and its embedding if any."""

    uuid: str
    search_key: str
    key_embedding: list[float] | None = None


class RewritePlan(BaseModel):
    """Rewrites timelines and retires or removes episodes: rollback and erasure.

    Applied atomically like a WritePlan. `delete_edges` and `new_edges` swap the versions of
    the timelines being recomputed; the rest of the graph is untouched.
    """

    group_id: str
    base: GroupVersion | None = BASE_FIELD
    delete_edges: list[str] = Field(default_factory=list)
    new_edges: list[FactEdge] = Field(default_factory=list)
    drop_mentions_from: list[str] = Field(default_factory=list)
    orphan_candidates: list[str] = Field(
        default_factory=list, description="Entity uuids deleted if nothing refers to them any more."
    )
    rolled_back: list[str] = Field(default_factory=list, description="Episodes to mark.")
    delete_episodes: list[str] = Field(default_factory=list, description="Erasure only.")
    delete_entities: list[str] = Field(default_factory=list, description="Erasure only.")
    delete_communities: list[str] = Field(
        default_factory=list, description="Summaries that drew on what is being removed."
    )
    scrub_summaries: list[str] = Field(
        default_factory=list,
        description="Erasure: names whose mention empties any entity summary (graphs written "
        "by other tools keep LLM summaries on entities).",
    )
    rekey: list[EpisodeKey] = Field(
        default_factory=list,
        description="Episodes whose search key the rewrite changes: "
        "the ones rolled back, and the turns after removed ones in their session.",
    )
    new_episodes: list[EpisodicNode] = Field(
        default_factory=list,
        description="Erasure, keeping other subjects' facts: redacted "
        "copies of deleted episodes, which the new versions cite.",
    )
    new_mentions: dict[str, list[str]] = Field(
        default_factory=dict, description="New episode uuid -> the entity uuids it names."
    )
    audit: AuditEvent | None = None


class PlanSummary(GraphCounters):
    """What an episode did to the graph, returned to the caller of add_episode."""

    entities_matched: int = 0
    facts_contradicted: int = Field(
        default=0, description="Stored facts the resolution call found contradicted."
    )
    resolution_error: str | None = Field(
        default=None, description="Resolution failed; the episode was resolved by exact names."
    )
    facts_dropped: dict[str, int] = Field(
        default_factory=dict, description="Proposed by the LLM, refused by kg, by reason."
    )
    quarantined: list[Quarantined] = Field(
        default_factory=list, description="Kept on the episode for review, never a memory."
    )
    prompt_tokens: int = 0
    completion_tokens: int = 0
    edges_added: list[str] = Field(default_factory=list)
    edges_closed: list[str] = Field(default_factory=list, description="Retired version uuids.")

    def counters(self) -> Counters:
        """The episode's metrics as stored on it (tokens summed, drops counted)."""
        return Counters(
            **self.model_dump(include=set(GraphCounters.model_fields)),
            llm_tokens=self.prompt_tokens + self.completion_tokens,
            facts_dropped=sum(self.facts_dropped.values()),
        )


class CommunityMembership(BaseModel):
    community_uuid: str
    entity_uuid: str


class CommunityPlan(BaseModel):
    """A (re)build or an incremental update of a group's communities, applied atomically."""

    group_id: str
    base: GroupVersion | None = BASE_FIELD
    delete: list[str] = Field(default_factory=list, description="Community uuids.")
    create: list[CommunityNode] = Field(default_factory=list)
    members: list[CommunityMembership] = Field(
        default_factory=list, description="HAS_MEMBER edges to add (new or joining members)."
    )
    mark_stale: list[str] = Field(default_factory=list, description="Community uuids.")
