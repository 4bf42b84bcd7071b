"""One request model per operation, the one every surface validates: `KG`'s methods (the
model, or its fields as keywords), the CLI, the HTTP API (kg.server.models subclasses them
only for what the server decides: the key's group, smaller pages, old field names) and the
HTTP client (a request's `model_dump(mode="json")` is its body). Search is
`kg.retrieval.request.SearchRequest`, beside the search configs it names.

No request names a group: the embedded engine takes `group_id` beside the request, a
server's key decides it. A field's description is what a model reads of it (MCP, OpenAPI).
"""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from kg.schemas.episode import Channel, EpisodeSource, StructuredFact, TrustTier
from kg.schemas.names import renamed_fields
from kg.schemas.timeparse import TimeInput
from kg.schemas.validation import Name, Text, check_text

__all__ = [
    "AddEpisodeRequest",
    "EntitiesRequest",
    "EpisodesRequest",
    "EraseEntityRequest",
    "EraseGroupRequest",
    "FactsRequest",
    "HistoryRequest",
    "LogRequest",
    "Request",
    "ReviewRequest",
    "RollbackRequest",
]


# A name to look up, as stored: data imported or written under older rules may hold what a
# new name may not (a control character), and must stay readable and erasable by it.
def _lookup(value: str) -> str:
    value = check_text(value)  # before any length: a lone surrogate is named as such
    if not value:
        raise ValueError("must not be empty")
    if len(value) > 512:
        raise ValueError(f"is {len(value)} characters long; the limit is 512")
    return value


Lookup = Annotated[str, AfterValidator(_lookup)]
Subject = Annotated[
    Lookup | None,
    Field(description="The entity the facts are about (their subject), e.g. 'Alice'."),
]
Predicate = Annotated[
    Name | None,
    Field(description="The relation, UPPER_SNAKE_CASE as the ontology names it, e.g. LIVES_IN."),
]
Object = Annotated[Lookup | None, Field(description="The value, e.g. 'Berlin'.")]
ValidAt = Annotated[
    TimeInput | None, Field(description="Valid time: what was true then. Default: now.")
]
KnownAt = Annotated[
    TimeInput | None,
    Field(description="Transaction time: as kg knew it then. Default: now."),
]


class Request(BaseModel):
    """A request: unknown fields are refused by name, and a validated one never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class AddEpisodeRequest(Request):
    """One episode to store. Structured facts (`source: facts`) need no LLM; text, message and
    JSON are extracted by the LLM, or stored unextracted (searchable) with `extract: false`."""

    source: EpisodeSource = Field(
        default=EpisodeSource.text,
        description="'facts' (the statements in `facts`, stored exactly, no LLM), or 'text', "
        "'message' (a conversation turn), 'json' (`content`, extracted by the LLM).",
    )
    content: Text = Field(default="", description="Text of the episode.")
    facts: list[StructuredFact] = Field(
        default_factory=list, description="Statements of a facts episode."
    )
    reference_time: TimeInput | None = Field(
        default=None,
        description="When it happened or was said: its facts' default valid time and the "
        "anchor of relative times in its text. Default: now.",
    )
    name: Text = Field(default="", max_length=500, description="A short title.")
    source_description: Text = Field(
        default="",
        max_length=2000,
        description="Where it came from, e.g. a URL; rollback can select episodes by it.",
    )
    channel: Channel | None = Field(
        default=None,
        description="Where it came from: user, tool, document or agent. Default: user (a "
        "server: the key's channel, which is also the ceiling).",
    )
    trust: TrustTier | None = Field(
        default=None, description="Trust tier when not the channel's; higher closes lower."
    )
    extract: bool | None = Field(
        default=None,
        description="Extract facts with the LLM. Default: when there is one; false stores "
        "the text unextracted (searchable, no facts).",
    )
    wait: bool = Field(
        default=True,
        description="Answer once the episode is in the graph. false: store it as queued "
        "(searchable at once) and answer; a background worker writes it later, in order.",
    )


class FactsRequest(Request):
    """The facts true at `valid_at`, as kg knew them at `known_at`, matching a subject,
    predicate and/or object."""

    subject: Subject = None
    predicate: Predicate = None
    object: Object = None
    valid_at: ValidAt = None
    known_at: KnownAt = None
    include_contested: bool = Field(
        default=False,
        description="Also facts held for review (a lower trust tier tried to close them).",
    )
    limit: int = Field(default=1000, ge=1, le=100_000, description="Facts at most.")


class HistoryRequest(Request):
    """Every version of the matching facts, closed ones included, with provenance."""

    subject: Subject = None
    predicate: Predicate = None
    object: Object = None
    limit: int = Field(default=1000, ge=1, le=100_000, description="Fact versions at most.")


class EntitiesRequest(Request):
    """Entities whose name contains `contains`, the most-described subjects first."""

    contains: Text = Field(default="", max_length=200, description="Part of the name; '' for all.")
    limit: int = Field(default=100, ge=1, le=10_000, description="Entities at most.")


class EpisodesRequest(Request):
    """A page of the group's episodes, newest first, whatever their status."""

    limit: int = Field(default=20, ge=1, le=1000, description="Episodes per page.")
    cursor: str | None = Field(
        default=None,
        max_length=1000,
        description="The previous page's next_cursor; none: the first page.",
    )


class LogRequest(Request):
    """The audit trail, newest first: rollbacks, erasures and closures."""

    limit: int = Field(default=100, ge=1, le=10_000, description="Events at most.")
    closures: bool = Field(default=True, description="Also each closed fact, with its sentence.")


class ReviewRequest(Request):
    """What kg holds back rather than believes: contested claims, then quarantined items
    not yet decided."""

    limit: int = Field(default=200, ge=1, le=10_000, description="Items of each kind at most.")


class RollbackRequest(Request):
    """Undo episodes as if never stored: by id (or a unique prefix of 6+ characters), or
    every episode from one source, optionally since a time. The plan only unless
    `dry_run: false`."""

    episode_ids: list[Name] = Field(
        default_factory=list,
        description="The episodes to undo (ids, or unique prefixes of 6+ characters).",
    )
    source_description: Text | None = Field(
        default=None,
        max_length=2000,
        description="Instead of ids: every episode from this source (e.g. a URL).",
    )
    since: TimeInput | None = Field(
        default=None, description="With source_description: only episodes from then on."
    )
    dry_run: bool = Field(default=True, description="true: the plan only; false: carry it out.")

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        # `apply` is the old opposite of `dry_run`; a subclass that declares it notes it itself.
        if "apply" in getattr(cls, "RENAMED", {}) or not isinstance(data, dict):
            return data
        if isinstance(data.get("apply"), bool):
            data = {**data, "apply": not data["apply"]}
        return renamed_fields(data, {"apply": "dry_run"})

    @model_validator(mode="after")
    def _ids_or_source(self) -> Self:
        if bool(self.episode_ids) == (self.source_description is not None):
            raise ValueError("give episode_ids or source_description, not both and not neither")
        if self.since is not None and self.source_description is None:
            raise ValueError("since goes with source_description")
        return self


class EraseEntityRequest(Request):
    """Physically delete a subject: its episodes, facts, entity and their traces on disk.
    Not undoable."""

    subject: Lookup = Field(description="The subject to erase, e.g. 'Alice'.")
    dry_run: bool = Field(
        default=False,
        description="Erase nothing: say what would go, including the facts about other "
        "subjects that go with the subject's episodes.",
    )
    keep_others: bool = Field(
        default=False,
        description="Keep those facts, re-asserted from a redacted copy of each episode (the "
        "subject's name cut out).",
    )

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        if "name" in getattr(cls, "RENAMED", {}):
            return data
        return renamed_fields(data, {"name": "subject"})


class EraseGroupRequest(Request):
    """Physically delete a whole group. Not undoable."""

    confirm: Name = Field(description="The group's id, to confirm: erasure cannot be undone.")
