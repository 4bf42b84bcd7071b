"""Request and response models at the server's edge, shared by the HTTP API and the MCP
tools: one validation, one set of messages. Each request is its operation's one model
(kg.schemas.requests, search's kg.retrieval.request) as the server takes it: unknown fields
refused, a page's size and cursor, caps one tenant's request must keep, old names read for
one release, and what only the server asks (an erasure's `confirm`); never a second field
list. None takes a group id: the key decides the group (a request that names one is refused
as an unknown field)."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime
from typing import Any, ClassVar, Literal, Self, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from kg.retrieval import SearchConfig, SearchResults
from kg.retrieval import request as search
from kg.retrieval.results import AbstainCheck, BranchReport, Ranked
from kg.retrieval.when import QueryTime
from kg.schemas import requests
from kg.schemas.episode import Channel, StructuredFact
from kg.schemas.graph import AuditEvent, EpisodicNode
from kg.schemas.keys import Role
from kg.schemas.metrics import EpisodeMetrics, Metrics
from kg.schemas.store import EntitySummary, StoreStats
from kg.schemas.timeparse import TimeInput
from kg.schemas.validation import Name, Text
from kg.schemas.views import (
    EntityView,
    EpisodeView,
    FactView,
    HitView,
    TrustWord,
    community_hit,
    entity_hit,
    entity_view,
    episode_hit,
    episode_view,
    fact_hit,
)
from kg.server.deprecation import Renamed, Renames, deprecated_names, renamed
from kg.server.pages import MAX_CURSOR, MAX_PAGE

MAX_CONTENT = 100_000  # characters of an episode's text
MAX_FACTS = 500  # statements of one structured episode
MAX_IDS = 100  # episodes one rollback names
MAX_QUERY = 2_000  # characters of a search query
MAX_CONTEXT_HITS = 100  # hits a context is rendered from (per scope)
MAX_CONTEXT_TOKENS = 20_000  # tokens of a context block


# Read by the one time parser (kg.schemas.timeparse): ISO 8601 (no offset: UTC), a date,
# year-month or year, or time words ('last year'); numbers are refused.
Time = TimeInput


class Strict(Renamed):
    model_config = ConfigDict(extra="forbid")


class AddEpisode(Strict, requests.AddEpisodeRequest):
    """`kg.schemas.requests.AddEpisodeRequest` as the server takes it: on the key's group,
    and on the key's channel unless the body names a lower one (a request never claims a
    higher trust tier than its key's: 403); one request's text and facts are capped."""

    content: Text = Field(default="", max_length=MAX_CONTENT, description="Text of the episode.")
    facts: list[StructuredFact] = Field(
        default_factory=list, max_length=MAX_FACTS, description="Statements of a facts episode."
    )


class FactsQuery(Strict, requests.FactsRequest):
    """`FactsRequest` as a server call takes it (MCP's facts_as_of)."""

    limit: int = Field(default=1000, ge=1, le=10_000, description="Facts at most.")


FactsFilter = FactsQuery  # a page's filter: every field but its size and position


class FactsPage(Strict, requests.FactsRequest):
    """`GET /v1/facts`'s parameters: `FactsRequest`, a page at a time."""

    limit: int = Field(default=100, ge=1, le=MAX_PAGE, description="Items in a page.")
    cursor: str | None = Field(
        default=None, max_length=MAX_CURSOR, description="A previous page's `next_cursor`."
    )


class HistoryQuery(Strict, requests.HistoryRequest):
    limit: int = Field(default=1000, ge=1, le=10_000, description="Fact versions at most.")


HistoryFilter = HistoryQuery


class HistoryPage(Strict, requests.HistoryRequest):
    """`GET /v1/history`'s parameters: `HistoryRequest`, a page at a time."""

    limit: int = Field(default=100, ge=1, le=MAX_PAGE, description="Items in a page.")
    cursor: str | None = Field(
        default=None, max_length=MAX_CURSOR, description="A previous page's `next_cursor`."
    )


class EntitiesPage(Strict, requests.EntitiesRequest):
    """`GET /v1/entities`'s parameters: `EntitiesRequest`, a page at a time (`q` is the old
    name of `contains`)."""

    RENAMED: ClassVar[Renames] = {"q": renamed("contains")}

    limit: int = Field(default=100, ge=1, le=MAX_PAGE, description="Items in a page.")
    cursor: str | None = Field(
        default=None, max_length=MAX_CURSOR, description="A previous page's `next_cursor`."
    )


class EpisodesPage(Strict, requests.EpisodesRequest):
    """`GET /v1/episodes`'s parameters."""

    limit: int = Field(default=50, ge=1, le=MAX_PAGE, description="Items in a page.")


class ReviewPage(Strict, requests.ReviewRequest):
    """`GET /v1/review`'s parameters: `ReviewRequest`, a page at a time."""

    limit: int = Field(default=100, ge=1, le=MAX_PAGE, description="Items in a page.")
    cursor: str | None = Field(
        default=None, max_length=MAX_CURSOR, description="A previous page's `next_cursor`."
    )


class LogPage(Strict, requests.LogRequest):
    """`GET /v1/log`'s parameters: `LogRequest`, a page at a time."""

    limit: int = Field(default=100, ge=1, le=MAX_PAGE, description="Items in a page.")
    cursor: str | None = Field(
        default=None, max_length=MAX_CURSOR, description="A previous page's `next_cursor`."
    )


class SearchRequest(Renamed, search.SearchRequest):
    """`kg.retrieval.request.SearchRequest` as the server takes it: the key decides the
    group, a query is at most MAX_QUERY characters, and a search is a named recipe (a
    `SearchConfig` and BFS `seeds` are the library's: refused here, as unknown fields).
    Closed facts are `include_closed` (`include_history` is its old name)."""

    RENAMED: ClassVar[Renames] = {"include_history": renamed("include_closed")}

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


class ContextRequest(SearchRequest, search.ContextRequest):
    """`kg.retrieval.request.ContextRequest` as the server takes it. Its cost is capped
    (hits and tokens), so one tenant's contexts stay cheap for the server: a bigger answer
    is a search."""

    limit: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_HITS)


class ContextResponse(BaseModel):
    context: str = Field(description="Quoted data for a prompt, within the token budget.")


class RollbackRequest(Strict, requests.RollbackRequest):
    """`kg.schemas.requests.RollbackRequest`; `apply: true` is the old `dry_run: false`."""

    RENAMED: ClassVar[Renames] = {"apply": renamed("dry_run", negate=True)}

    episode_ids: list[Name] = Field(
        default_factory=list,
        max_length=MAX_IDS,
        description=requests.RollbackRequest.model_fields["episode_ids"].description,
    )


class EraseEntityRequest(Strict, requests.EraseEntityRequest):
    """`kg.schemas.requests.EraseEntityRequest`, confirmed (`name` is the subject's old name)."""

    RENAMED: ClassVar[Renames] = {"name": renamed("subject")}

    confirm: Name | None = Field(
        default=None,
        description="The subject again: erasure cannot be undone. Not needed for a dry run.",
    )


class EraseGroupRequest(Strict, requests.EraseGroupRequest):
    """`kg.schemas.requests.EraseGroupRequest`: the key's group, which `confirm` names."""


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


class Decision(Strict):
    """A person's answer to a review item (`GET /v1/review`), stored as a user-channel
    episode through the timeline rules: accept states the claim, edit states the right value
    instead, reject restates what kg believes (a quarantined item: a note that it was
    rejected). Rolling that episode back puts the item back under review."""

    action: Literal["accept", "reject", "edit"]
    object: Name | None = Field(default=None, description="edit only: the right value.")


class Statement(BaseModel):
    """What one supporting episode said about the fact: its statement, and for a text,
    message or JSON episode the line of its text that names it (the extractor's own quote
    is checked at ingest but not kept)."""

    episode_id: str
    said: StructuredFact
    passage: str | None = None


class EpisodeRow(EpisodeView):
    """An episode in a list: its view, and what became of it."""

    error: str | None = Field(default=None, description="Why a failed episode failed.")
    facts_added: int = 0
    facts_closed: int = 0

    @classmethod
    def of(cls, node: EpisodicNode) -> Self:
        return cls(
            **dict(episode_view(node)),
            error=node.error,
            facts_added=node.facts_added,
            facts_closed=node.facts_closed,
        )


class EpisodeDetail(EpisodeRow):
    """One episode: its row, its text and where it came from, and its ingest metrics."""

    content: str
    source_description: str = ""
    trust: TrustWord = Field(description="Its facts' trust tier.")
    extractor: str = Field(description="What turned it into facts (a model, or 'structured').")
    metrics: EpisodeMetrics

    @classmethod
    def of(cls, node: EpisodicNode) -> Self:
        row = dict(EpisodeRow.of(node))
        counted = node.model_dump(include=set(EpisodeMetrics.model_fields))
        metrics = EpisodeMetrics.model_validate(counted)
        return cls(
            **row,
            content=node.content,
            source_description=node.source_description,
            trust=cast(TrustWord, node.trust.name),
            extractor=node.extractor,
            metrics=metrics,
        )


class EntityRow(EntityView):
    """An entity to pick a subject from: its view, and how much is said about it."""

    as_subject: int = Field(description="Fact versions (every version) with it as subject.")
    as_object: int = Field(description="Fact versions with it as object.")

    @classmethod
    def of(cls, found: EntitySummary) -> Self:
        return cls(
            **dict(entity_view(found.entity)),
            as_subject=found.as_subject,
            as_object=found.as_object,
        )


class Ranking(BaseModel):
    """How one hit was ranked (the CLI's --explain): each branch's rank and score, and the
    fused score before reranking."""

    kind: str
    id: str
    fused_score: float
    ranks: dict[str, int] = Field(description="1-based rank in each branch that found it.")
    branch_scores: dict[str, float]


class SearchResponse(BaseModel):
    """The hits of every scope searched, best first, each in the one hit shape; how each
    hit ranked and how each branch did; the time the query was read in."""

    query: str
    hits: list[HitView]
    rankings: list[Ranking] = Field(description="One per hit, in the same order.")
    branches: list[BranchReport] = Field(description="Each branch's hits and latency.")
    abstained: dict[str, float] = Field(
        default_factory=dict,
        description="Scopes left empty by `abstain_below` or `abstain_joint_below`, and the "
        "signal that fell below its cutoff.",
    )
    abstain_checks: dict[str, list[AbstainCheck]] = Field(
        default_factory=dict,
        description="Per scope, the abstention tests run: signal, value, cutoff, refused.",
    )
    time: QueryTime | None = None
    latency_ms: float = 0.0

    @classmethod
    def of(cls, r: SearchResults) -> SearchResponse:
        pairs: list[tuple[HitView, Ranked]] = [
            *((fact_hit(h.fact, h.score, closed=h.closed), h) for h in r.facts),
            *((episode_hit(h.episode, h.score), h) for h in r.episodes),
            *((entity_hit(h.entity, h.score), h) for h in r.entities),
            *((community_hit(h.community, h.score), h) for h in r.communities),
        ]
        pairs.sort(key=lambda p: -p[0].score)
        rankings = [
            Ranking(
                kind=v.kind,
                id=v.id,
                fused_score=h.fused_score,
                ranks=h.ranks,
                branch_scores=h.branch_scores,
            )
            for v, h in pairs
        ]
        abstained = {str(k): v for k, v in r.abstained.items()}
        return cls(
            query=r.query,
            hits=[v for v, _ in pairs],
            rankings=rankings,
            branches=r.branches,
            abstained=abstained,
            abstain_checks={str(k): v for k, v in r.abstain_checks.items()},
            time=r.time,
            latency_ms=r.latency_ms,
        )


class WhyResponse(BaseModel):
    versions: list[FactView] = Field(description="Every version, oldest first.")
    episodes: list[EpisodeDetail] = Field(description="The episodes behind it and that closed it.")
    statements: list[Statement] = Field(
        default_factory=list, description="Per supporting episode, what it said."
    )


class LogEvent(BaseModel):
    """One entry of the audit trail: a rollback or an erasure with its counts, or the
    closure of a fact with its sentence."""

    uuid: str
    kind: str = Field(description="'rollback', 'erasure' or 'closure'.")
    created_at: datetime
    episodes: list[str] = Field(default_factory=list)
    detail: str = Field(default="", description="A closure's sentence; empty otherwise.")
    counts: dict[str, int] | None = Field(
        default=None, description="A rollback's or an erasure's counts (ids and counts only)."
    )

    @classmethod
    def of(cls, event: AuditEvent) -> LogEvent:
        """The store keeps a rollback's counts as JSON text: answered as an object, so a
        client decodes the answer once."""
        counts = None
        detail = event.detail
        with contextlib.suppress(ValueError):
            found = json.loads(detail) if detail.startswith("{") else None
            if isinstance(found, dict) and all(isinstance(v, int) for v in found.values()):
                counts, detail = found, ""
        return cls(
            uuid=event.uuid,
            kind=event.kind,
            created_at=event.created_at,
            episodes=event.episodes,
            detail=detail,
            counts=counts,
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


class FieldError(BaseModel):
    """One invalid input: where it is and what is wrong with it."""

    pointer: str | None = Field(
        default=None, description="JSON Pointer into the body (RFC 6901), e.g. '#/facts/0/subject'."
    )
    parameter: str | None = Field(default=None, description="The query or path parameter.")
    field: str = Field(description="Dotted name of the input, e.g. 'facts.0.subject'.")
    detail: str


class Problem(BaseModel):
    """An error, as RFC 9457 problem details; `detail` is the CLI's one-line message, and
    an invalid request lists each invalid input in `errors`."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[FieldError] | None = Field(
        default=None, description="One entry per invalid input (400 and 422)."
    )


__all__ = [
    "AddEpisode",
    "ContextRequest",
    "ContextResponse",
    "Correction",
    "EntitiesPage",
    "EntityRow",
    "EpisodeDetail",
    "EpisodeRow",
    "EpisodesPage",
    "EraseEntityRequest",
    "EraseGroupRequest",
    "FactsFilter",
    "FactsPage",
    "FactsQuery",
    "FieldError",
    "Health",
    "HistoryFilter",
    "HistoryPage",
    "HistoryQuery",
    "LogEvent",
    "LogPage",
    "Problem",
    "Ranking",
    "ReviewPage",
    "RollbackRequest",
    "SearchRequest",
    "SearchResponse",
    "Statement",
    "StatsResponse",
    "Whoami",
    "WhyResponse",
    "deprecated_names",
]
