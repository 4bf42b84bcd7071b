"""What an agent hands to kg: an episode, and for structured episodes its facts."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import IntEnum, StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kg.schemas.timeparse import TimeInput
from kg.schemas.validation import GroupId, Name, Text


class EpisodeSource(StrEnum):
    message = "message"
    text = "text"
    json = "json"
    facts = "facts"


class Channel(StrEnum):
    """Where an episode came from; decides its default trust tier."""

    user = "user"
    tool = "tool"
    document = "document"
    agent = "agent"


class TrustTier(IntEnum):
    """Higher closes lower, never the reverse: user-stated > tool > document > agent-inferred."""

    agent = 0
    document = 1
    tool = 2
    user = 3

    @classmethod
    def for_channel(cls, channel: Channel) -> TrustTier:
        return cls[channel.value]


class StructuredFact(BaseModel):
    """One subject / predicate / object statement, with optional valid-time bounds.

    `valid_at` defaults to the episode's reference time. `invalid_at`, when given, says when
    the fact stopped being true; for a fact already stored that ends it at that time.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    subject: Name
    predicate: Name
    object: Name
    valid_at: TimeInput | None = None
    invalid_at: TimeInput | None = None
    fact: Text | None = Field(default=None, description="Sentence form; generated when absent.")
    subject_type: str | None = None
    object_type: str | None = None

    @model_validator(mode="after")
    def _interval(self) -> Self:
        if self.valid_at and self.invalid_at and self.invalid_at <= self.valid_at:
            raise ValueError(
                f"invalid_at ({self.invalid_at.isoformat()}) must be after "
                f"valid_at ({self.valid_at.isoformat()})"
            )
        return self


class Episode(BaseModel):
    """The unit of ingestion. Episodes are append-only: the raw source of truth of the graph."""

    model_config = ConfigDict(extra="forbid")

    group_id: GroupId = "default"
    source: EpisodeSource
    reference_time: TimeInput = Field(
        default_factory=lambda: datetime.now(UTC),
        description="When the episode happened (default now); relative times and default "
        "valid_at use it.",
    )
    name: Text = ""
    content: Text = ""
    facts: list[StructuredFact] = Field(default_factory=list)
    source_description: Text = ""
    channel: Channel = Channel.user
    trust: TrustTier | None = Field(default=None, description="Defaults to the channel's tier.")
    session_id: Text | None = Field(
        default=None,
        description="The conversation it belongs to: with `turns`, the "
        "idempotency key; alone, the key background ingestion debounces on.",
    )
    turns: tuple[int, int] | None = Field(
        default=None, description="The first and last turn it covers in its session."
    )

    @field_validator("trust", mode="before")
    @classmethod
    def _trust_name(cls, v: Any) -> Any:
        if isinstance(v, str) and not v.isdigit():
            try:
                return TrustTier[v.strip().lower()]
            except KeyError:
                names = ", ".join(t.name for t in TrustTier)
                raise ValueError(f"unknown trust tier {v!r}; use one of {names} or 0-3") from None
        return v

    @model_validator(mode="after")
    def _payload(self) -> Self:
        if self.source is EpisodeSource.facts:
            if not self.facts:
                raise ValueError("a 'facts' episode needs at least one fact")
        else:
            if self.facts:
                raise ValueError(f"a {self.source.value!r} episode carries content, not facts")
            if not self.content.strip():
                raise ValueError(f"a {self.source.value!r} episode needs non-empty content")
        if self.turns is not None and not 0 <= self.turns[0] <= self.turns[1]:
            raise ValueError(f"turns must be (first, last) with 0 <= first <= last: {self.turns}")
        if self.turns is not None and self.session_id is None:
            raise ValueError("turns need a session_id: the key is (source, session, turns)")
        for i, f in enumerate(self.facts):
            if f.invalid_at and f.valid_at is None and f.invalid_at <= self.reference_time:
                raise ValueError(
                    f"facts[{i}]: invalid_at ({f.invalid_at.isoformat()}) must be after the "
                    f"episode's reference_time ({self.reference_time.isoformat()}), which is "
                    "its valid_at by default"
                )
        return self

    @property
    def idempotency_key(self) -> str | None:
        """(source, session, turn range), when the caller gave a session and turns: the same
        turns of the same session from the same source are one episode, whatever the text."""
        if self.session_id is None or self.turns is None:
            return None
        source = self.source_description or self.source.value
        return f"{source}\x1f{self.session_id}\x1f{self.turns[0]}-{self.turns[1]}"

    @property
    def trust_tier(self) -> TrustTier:
        return self.trust if self.trust is not None else TrustTier.for_channel(self.channel)
