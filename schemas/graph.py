"""The three layers of the graph as stored: episodes, entities and fact edges, communities.

Labels and property names follow Graphiti's where they overlap, so a Graphiti graph can be read;
the extra properties (name_key, fact_uuid, supersedes, status, ...) are ones Graphiti ignores.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kg.schemas.episode import Channel, EpisodeSource, StructuredFact, TrustTier
from kg.schemas.metrics import EpisodeMetrics
from kg.schemas.validation import STORED, UtcDatetime, name_key


class EpisodeStatus(StrEnum):
    """`queued` and `processing` are the background queue's states (see kg.queue): stored,
    searchable as text, not yet extracted. `ingested` is done."""

    queued = "queued"
    processing = "processing"
    ingested = "ingested"
    failed = "failed"
    rolled_back = "rolled_back"


# Episodes whose text search may return: done, or still in the queue (read-your-writes).
SEARCHABLE_STATUSES = (EpisodeStatus.ingested, EpisodeStatus.queued, EpisodeStatus.processing)


class EdgeStatus(StrEnum):
    active = "active"
    # A lower trust tier tried to close a higher one: kept for review, not in the default view.
    contested = "contested"


# The embedding properties of the stored models: exported whole, never returned by searches.
VECTOR_FIELDS = ("fact_embedding", "name_embedding", "content_embedding", "key_embedding")
FOREIGN_EXTRACTOR = "foreign"  # rows another tool (graphiti-core) wrote, read before adoption
_FOREIGN_CHANNEL = {"message": Channel.user, "json": Channel.tool}


def foreign_channel(source: Any) -> Channel:
    """The channel of an episode another tool wrote, by its source: a conversation is the
    user's word, JSON a tool's output, anything else a document."""
    return _FOREIGN_CHANNEL.get(str(source), Channel.document)


def _foreign(data: Any, **defaults: Any) -> Any:
    """kg always writes `extractor`; a row without one was written by another tool (e.g.
    graphiti-core, whose property names kg shares). Fill what kg needs to read it."""
    if isinstance(data, dict) and "extractor" not in data:
        return {
            **{k: v for k, v in defaults.items() if data.get(k) is None},
            **{k: v for k, v in data.items() if v is not None},
        }
    return data


class Quarantined(BaseModel):
    """Text from an untrusted channel that read as an instruction to the assistant.

    Kept on its episode for review, never made a memory: a quarantined fact creates no fact
    or entity (so no search, view or context can return it), and a quarantined passage of an
    episode's text is withheld when `context()` renders the episode.
    """

    kind: Literal["fact", "passage"]
    reason: str = Field(description="The guard rule it tripped, e.g. 'override'.")
    text: str = Field(description="The passage, or the fact as the guard read it.")
    fact: StructuredFact | None = Field(default=None, description="The fact it would have been.")


class EpisodicNode(EpisodeMetrics):
    """An episode as stored, with what ingesting it did and cost (flat, for aggregation)."""

    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _from_foreign(cls, data: Any) -> Any:
        if isinstance(data, dict) and "extractor" not in data:
            channel = foreign_channel(data.get("source"))
            trust = TrustTier.for_channel(channel)
            data = _foreign(
                data,
                content_hash="",
                channel=channel,
                trust=trust,
                extractor=FOREIGN_EXTRACTOR,
                valid_at=data.get("created_at"),
            )
        return data

    uuid: str
    group_id: str
    name: str = ""
    source: EpisodeSource
    source_description: str = ""
    content: str
    content_hash: str
    valid_at: UtcDatetime
    created_at: UtcDatetime
    channel: Channel
    trust: TrustTier
    extractor: str
    status: EpisodeStatus = EpisodeStatus.ingested
    extraction: str | None = Field(
        default=None, description="LLM episodes: the vetted facts as JSON, for replay."
    )
    error: str | None = Field(default=None, description="Why a failed episode failed.")
    quarantine: str | None = Field(
        default=None,
        description="What the instruction guard quarantined, as a JSON list of "
        "`Quarantined` (a graph property holds no nested objects).",
    )
    content_embedding: list[float] | None = Field(
        default=None, description="The content's own embedding; absent without an embedder."
    )
    # What the episode is found by (kg.search_keys): its content, the turn before it in its
    # session, and once extracted its facts. Derived, rebuilt by rollback and erasure; the
    # content itself is never changed.
    search_key: str | None = Field(
        default=None,
        description="The text the episodes' full-text branch searches; "
        "None on episodes written before keys (read as the content).",
    )
    key_embedding: list[float] | None = Field(
        default=None,
        description="The key's embedding: what the episodes' cosine branch "
        "searches; absent without an embedder.",
    )
    # The background queue (kg.queue); absent on episodes ingested by a waiting add_episode.
    queued_at: UtcDatetime | None = Field(
        default=None,
        description="When it was enqueued: its text was known (searchable) from "
        "then; `created_at` is when its facts were written.",
    )
    attempts: int = Field(default=0, description="Times a worker claimed it.")
    next_attempt_at: UtcDatetime | None = Field(
        default=None, description="Not claimed before this (retry backoff, session debounce)."
    )
    lease_owner: str | None = Field(default=None, description="The worker processing it.")
    lease_expires_at: UtcDatetime | None = Field(
        default=None, description="After this another worker may take it over."
    )
    idempotency_key: str | None = Field(
        default=None,
        description="(source, session, turn range) when the caller gave them: a "
        "second episode with the same key is a duplicate, whatever its content.",
    )
    session_id: str | None = Field(default=None, description="The debounce key, if any.")
    staged: str | None = Field(
        default=None,
        description="The extraction a worker got for it, kept so a worker "
        "taking it over does not ask the LLM again (JSON; cleared when written).",
    )
    failure_reasons: list[str] = Field(
        default_factory=list, description="One short reason per failed attempt."
    )

    def quarantined(self) -> list[Quarantined]:
        if not self.quarantine:
            return []
        return [Quarantined.model_validate(q, context=STORED) for q in json.loads(self.quarantine)]


class EntityNode(BaseModel):
    model_config = ConfigDict(extra="ignore")

    uuid: str
    group_id: str
    name: str
    name_key: str = Field(description="Normalised name used for exact resolution.")
    labels: list[str] = Field(default_factory=list)
    summary: str = ""
    name_embedding: list[float] | None = None
    created_at: UtcDatetime

    @model_validator(mode="before")
    @classmethod
    def _from_foreign(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("name_key") and "name" in data:
            data = {**data, "name_key": name_key(str(data["name"]))}
        return data


class FactEdge(BaseModel):
    """One *version* of a fact: a belief about its valid interval, held over a transaction interval.

    Closing a fact never edits the interval of a stored version: the version is retired
    (`expired_at` set) and a copy carrying the new `invalid_at` is created with `supersedes`
    pointing back. So "true at V as known at T" is a plain filter on any version, for any T.
    All versions of one fact share `fact_uuid`.
    """

    model_config = ConfigDict(extra="ignore")

    uuid: str
    fact_uuid: str
    group_id: str
    source_node_uuid: str
    target_node_uuid: str
    name: str = Field(description="The predicate, UPPER_SNAKE_CASE.")
    fact: str
    fact_embedding: list[float] | None = None
    episodes: list[str] = Field(description="Supporting episode uuids; the first created it.")
    episode_valid_at: list[UtcDatetime] = Field(
        default_factory=list,
        description="Aligned with `episodes`: the valid time each one asserted the fact at. "
        "A restatement at a later time is a point on the timeline, kept so that closing the "
        "fact before it lets it resume there.",
    )
    valid_at: UtcDatetime
    invalid_at: UtcDatetime | None = None
    created_at: UtcDatetime
    expired_at: UtcDatetime | None = None
    invalidated_by: str | None = Field(default=None, description="Episode that closed it.")
    invalidated_edge: str | None = Field(default=None, description="Edge whose fact closed it.")
    invalidation_reason: str | None = Field(default=None, description="Why it was closed.")
    supersedes: str | None = Field(default=None, description="Version this one replaced.")
    channel: Channel
    trust: TrustTier
    extractor: str
    status: EdgeStatus = EdgeStatus.active

    @model_validator(mode="before")
    @classmethod
    def _from_foreign(cls, data: Any) -> Any:
        if isinstance(data, dict) and "extractor" not in data:
            data = _foreign(
                data,
                fact_uuid=data.get("uuid"),
                channel="document",
                trust=TrustTier.for_channel(Channel.document),
                extractor=FOREIGN_EXTRACTOR,
                episodes=[],
                fact="",
                valid_at=data.get("created_at"),
            )
        return data

    def holds_at(self, at: datetime) -> bool:
        return self.valid_at <= at and (self.invalid_at is None or self.invalid_at > at)


class AuditEvent(BaseModel):
    """A record of something kg did to the graph on request: a rollback or an erasure.

    `detail` is counts and ids only, never fact text or names: an erasure must leave nothing
    of its subject behind, audit trail included.
    """

    model_config = ConfigDict(extra="ignore")

    uuid: str
    group_id: str
    kind: str
    created_at: UtcDatetime
    episodes: list[str] = Field(default_factory=list)
    detail: str = ""


class CommunityNode(BaseModel):
    """A cluster of entities (HAS_MEMBER edges) with a summary of the facts among them."""

    model_config = ConfigDict(extra="ignore")

    uuid: str
    group_id: str
    name: str
    summary: str = ""
    name_embedding: list[float] | None = None
    created_at: UtcDatetime
    episodes: list[str] = Field(
        default_factory=list,
        description="Episodes behind the facts the summary drew on: rollback and erasure of "
        "any of them refresh it.",
    )
    fingerprint: str = Field(
        default="", description="Hash of the members and facts summarised; unchanged = reused."
    )
    stale: bool = Field(default=False, description="Entities joined since the summary was written.")
    summarizer: str = Field(default="", description="'llm:<model>' or the extractive fallback.")


class Fact(BaseModel):
    """A fact edge as a reader sees it: the version plus its endpoints' names."""

    subject: str
    predicate: str
    object: str
    edge: FactEdge

    @property
    def valid_at(self) -> datetime:
        return self.edge.valid_at

    @property
    def invalid_at(self) -> datetime | None:
        return self.edge.invalid_at

    def as_row(self) -> dict[str, Any]:
        e = self.edge
        return {
            "subject": self.subject,
            "predicate": self.predicate,
            "object": self.object,
            "valid_at": e.valid_at.isoformat(),
            "invalid_at": e.invalid_at.isoformat() if e.invalid_at else None,
            "created_at": e.created_at.isoformat(),
            "expired_at": e.expired_at.isoformat() if e.expired_at else None,
            "status": e.status.value,
            "trust": e.trust.name,
            "episodes": list(e.episodes),
            "invalidated_by": e.invalidated_by,
            "uuid": e.uuid,
            "fact_uuid": e.fact_uuid,
        }
