"""Request and response models at the server's edge, shared by the HTTP API and the MCP
tools: one validation, one set of messages. None takes a group id: the key decides the group
(a request that names one is refused as an unknown field)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from kg.retrieval import SearchConfig
from kg.retrieval import request as search
from kg.schemas.episode import Channel, EpisodeSource, StructuredFact, TrustTier
from kg.schemas.graph import EpisodicNode, Fact
from kg.schemas.keys import Role
from kg.schemas.metrics import Metrics
from kg.schemas.store import StoreStats
from kg.schemas.timeparse import TimeInput
from kg.schemas.validation import Name, Text

MAX_CONTENT = 100_000  # characters of an episode's text
MAX_FACTS = 500  # statements of one structured episode
MAX_QUERY = 2_000  # characters of a search query
MAX_IDS = 100  # episodes one rollback names
MAX_CONTEXT_HITS = 100  # hits a context is rendered from (per scope)
MAX_CONTEXT_TOKENS = 20_000  # tokens of a context block


# Read by the one time parser (kg.schemas.timeparse): ISO 8601 (no offset: UTC), a date,
# year-month or year, or time words ('last year'); numbers are refused.
Time = TimeInput


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AddEpisode(Strict):
    """One episode. Structured facts (`source: facts`) need no LLM; text, message and JSON
    are extracted by the server's LLM, or stored unextracted (searchable) with
    `extract: false`."""

    source: EpisodeSource = Field(
        default=EpisodeSource.text,
        description="'facts' (structured, no LLM), or 'text', 'message', 'json'.",
    )
    content: Text = Field(default="", max_length=MAX_CONTENT, description="Text of the episode.")
    facts: list[StructuredFact] = Field(
        default_factory=list, max_length=MAX_FACTS, description="Statements of a facts episode."
    )
    reference_time: Time | None = Field(
        default=None, description="When it happened (ISO 8601 with a timezone); default now."
    )
    name: Text = Field(default="", max_length=500)
    source_description: Text = Field(
        default="", max_length=2000, description="Where it came from, e.g. a URL."
    )
    channel: Channel | None = Field(
        default=None,
        description="Where it came from. Default: the key's channel, which is also the "
        "ceiling: a request never claims a higher trust tier than its key's (403).",
    )
    trust: TrustTier | None = Field(
        default=None, description="Default: the channel's tier; at most the key's."
    )
    extract: bool | None = Field(
        default=None,
        description="Extract facts with the server's LLM. Default: when the server has one; "
        "false stores the text unextracted (searchable, no facts).",
    )
    wait: bool = Field(
        default=True,
        description="Answer once the episode is in the graph. false: store it as queued "
        "(searchable at once) and answer; the server's background worker writes it in order.",
    )


class FactsQuery(Strict):
    subject: Name | None = None
    predicate: Name | None = None
    object: Name | None = None
    valid_at: Time | None = Field(default=None, description="Valid time; default now.")
    known_at: Time | None = Field(
        default=None, description="Transaction time: as kg knew it then; default now."
    )
    include_contested: bool = False
    limit: int = Field(default=1000, ge=1, le=10_000)


class HistoryQuery(Strict):
    subject: Name | None = None
    predicate: Name | None = None
    object: Name | None = None
    limit: int = Field(default=1000, ge=1, le=10_000)


class SearchRequest(search.SearchRequest):
    """`kg.retrieval.request.SearchRequest` as the server takes it: the key decides the
    group, a query is at most MAX_QUERY characters, and a search is a named recipe (a
    `SearchConfig` and BFS `seeds` are the library's: refused here, as unknown fields)."""

    query: Text = Field(min_length=1, max_length=MAX_QUERY)
    recipe: str | None = Field(default=None, max_length=100, description="A named recipe.")
    config: SkipJsonSchema[SearchConfig | None] = None
    seeds: SkipJsonSchema[list[Text]] = Field(default_factory=list)
    center: Name | None = Field(default=None, description="Entity name to rank around.")
    min_score: float | None = Field(default=None, allow_inf_nan=False, ge=-1e9, le=1e9)
    abstain_below: float | None = Field(
        default=None,
        allow_inf_nan=False,
        ge=-1.0,
        le=1.0,
        description=search.SearchRequest.model_fields["abstain_below"].description,
    )

    @model_validator(mode="before")
    @classmethod
    def _library_only(cls, data: Any) -> Any:
        for name in ("config", "seeds"):
            if isinstance(data, dict) and name in data:
                raise ValueError(f"{name}: extra inputs are not permitted")
        return data


class ContextRequest(SearchRequest):
    """A search rendered for a prompt. Its cost is capped (hits and tokens), so one
    tenant's contexts stay cheap for the server: a bigger answer is a search."""

    limit: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_HITS)
    max_tokens: int = Field(default=1000, ge=50, le=MAX_CONTEXT_TOKENS)


class ContextResponse(BaseModel):
    context: str = Field(description="Quoted data for a prompt, within the token budget.")


class RollbackRequest(Strict):
    """Episodes by id, or every episode from one source (optionally since a time)."""

    episode_ids: list[Name] = Field(default_factory=list, max_length=MAX_IDS)
    source_description: Text | None = Field(default=None, max_length=2000)
    since: Time | None = None
    apply: bool = Field(default=False, description="false: the plan only (a dry run).")


class EraseEntityRequest(Strict):
    name: Name
    confirm: Name | None = Field(
        default=None, description="The same name again: erasure cannot be undone. "
        "Not needed for a dry run.",
    )  # fmt: skip
    dry_run: bool = Field(
        default=False, description="Erase nothing: say what would go, including the facts "
        "about other subjects that go with the subject's episodes.",
    )  # fmt: skip
    keep_others: bool = Field(
        default=False, description="Keep those facts, re-asserted from a redacted copy of "
        "each episode (the subject's name cut out).",
    )  # fmt: skip


class EraseGroupRequest(Strict):
    confirm: Name = Field(description="The group id (see /v1/whoami): cannot be undone.")


class Correction(Strict):
    """'That's wrong / that changed': the right value, and since when it is true. Stored as a
    structured episode on the key's channel, so the normal timeline rules close the old value
    (a single-valued predicate by its new value; a multi-valued one by ending it then) when
    the key's trust reaches the old value's."""

    object: Name = Field(description="The right value, e.g. 'Lyon'.")
    valid_at: Time = Field(description="When it became true (ISO 8601 with a timezone).")
    source_description: Text = Field(
        default="correction", max_length=2000, description="Recorded on the episode."
    )


class Statement(BaseModel):
    """What one supporting episode said about the fact: its statement, and for a text,
    message or JSON episode the line of its text that names it (the extractor's own quote
    is checked at ingest but not kept)."""

    episode_uuid: str
    said: StructuredFact
    passage: str | None = None


class WhyResponse(BaseModel):
    versions: list[Fact]
    episodes: list[EpisodicNode]
    statements: list[Statement] = Field(
        default_factory=list, description="Per supporting episode, what it said."
    )


class Whoami(BaseModel):
    group_id: str
    role: Role
    key_id: str
    channel: Channel = Field(description="Its writes' channel and trust ceiling.")


class StatsResponse(BaseModel):
    stats: StoreStats
    metrics: Metrics


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    store: str
    version: str


class Problem(BaseModel):
    """An error, as RFC 9457 problem details; `detail` is the CLI's one-line message."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str


__all__ = [
    "AddEpisode",
    "ContextRequest",
    "ContextResponse",
    "Correction",
    "EraseEntityRequest",
    "EraseGroupRequest",
    "FactsQuery",
    "Health",
    "HistoryQuery",
    "Problem",
    "RollbackRequest",
    "SearchRequest",
    "Statement",
    "StatsResponse",
    "Whoami",
    "WhyResponse",
]
