"""What every surface shows of a fact, episode, entity or search hit: one JSON shape each, the
same from `kg ... --json`, HTTP and MCP.

Compact, ids included (any unique prefix of 6+ characters is accepted back), times ISO-8601
UTC ending in 'Z' (null when open), trust as a word. Built from the stored models by the
`*_view` converters; the stored models themselves stay internal.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Literal, Protocol, TypeVar, cast

from pydantic import (
    BaseModel,
    Field,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from kg.schemas.graph import CommunityNode, EdgeStatus, EntityNode, EpisodicNode, Fact

__all__ = [
    "EntityView",
    "EpisodeView",
    "FactView",
    "HitView",
    "Page",
    "community_hit",
    "entity_hit",
    "entity_view",
    "episode_hit",
    "episode_view",
    "fact_hit",
    "fact_status",
    "fact_view",
    "hit_views",
    "iso_z",
]


def iso_z(d: datetime | None) -> str | None:
    """ISO-8601 in UTC with a 'Z' (microseconds only when there are any); None stays None."""
    if d is None:
        return None
    return d.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _z(d: datetime) -> str:
    return iso_z(d) or ""


ZTime = Annotated[datetime, PlainSerializer(_z, return_type=str, when_used="json-unless-none")]
TrustWord = Literal["user", "tool", "document", "agent"]
FactStatus = Literal["current", "closed", "contested"]
EpisodeStatusWord = Literal["queued", "processing", "ingested", "failed", "rolled_back"]
HitKind = Literal["fact", "episode", "entity", "community"]


class FactView(BaseModel):
    """One fact (one version of it) as every surface shows it."""

    id: str = Field(description="The fact's id, shared by its versions (`why` takes it).")
    subject: str
    predicate: str
    object: str
    text: str = Field(description="The fact as a sentence.")
    valid_from: ZTime = Field(description="When it became true.")
    valid_to: ZTime | None = Field(description="When it stopped being true; null: still true.")
    known_from: ZTime = Field(description="When kg learned it (this version was written).")
    known_to: ZTime | None = Field(
        description="When kg stopped believing this version; null: still believed."
    )
    trust: TrustWord = Field(
        description="Trust tier of its source: user > tool > document > agent."
    )
    status: FactStatus = Field(
        description="current; closed (no longer true, or this version retired); contested (a "
        "lower trust tier tried to close a higher one: kept for review)."
    )
    episode_id: str | None = Field(description="The episode that first stated it.")
    closed_by_episode_id: str | None = Field(description="The episode that closed it, if any.")


class EpisodeView(BaseModel):
    """One episode (a message, text, JSON or facts handed to kg) as every surface shows it."""

    id: str
    name: str
    source: Literal["message", "text", "json", "facts"]
    channel: TrustWord = Field(description="Where it came from; sets its facts' trust.")
    reference_time: ZTime = Field(description="When it happened.")
    created_at: ZTime = Field(description="When kg stored it.")
    status: EpisodeStatusWord


class EntityView(BaseModel):
    id: str
    name: str
    labels: list[str] = Field(default_factory=list)
    summary: str = ""


# Which optional fields of a hit belong to each kind (the rest are left out of its JSON).
_FACT_FIELDS = tuple(n for n in FactView.model_fields if n not in ("id", "text"))
_EPISODE_FIELDS = tuple(n for n in EpisodeView.model_fields if n != "id")
_KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "fact": _FACT_FIELDS,
    "episode": _EPISODE_FIELDS,
    "entity": ("name", "labels"),
    "community": ("name",),
}


class HitView(BaseModel):
    """One search hit: kind, id, score and text, plus the fact's or episode's fields (an
    entity's or community's name) when it is one; fields of other kinds are left out."""

    kind: HitKind
    id: str
    score: float = Field(description="The final ranking score; higher is better.")
    text: str
    subject: str | None = None
    predicate: str | None = None
    object: str | None = None
    valid_from: ZTime | None = None
    valid_to: ZTime | None = None
    known_from: ZTime | None = None
    known_to: ZTime | None = None
    trust: TrustWord | None = None
    status: FactStatus | EpisodeStatusWord | None = None
    episode_id: str | None = None
    closed_by_episode_id: str | None = None
    name: str | None = None
    source: Literal["message", "text", "json", "facts"] | None = None
    channel: TrustWord | None = None
    reference_time: ZTime | None = None
    created_at: ZTime | None = None
    labels: list[str] | None = None

    # No return annotation: with one, pydantic would publish it (a bare object) as the
    # serialization schema (FastAPI, MCP output schemas) in place of the model's.
    @model_serializer(mode="wrap")
    def _own_fields(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo):  # type: ignore[no-untyped-def]
        data: dict[str, Any] = handler(self)
        keep = {"kind", "id", "score", "text", *_KIND_FIELDS[self.kind]}
        return {k: v for k, v in data.items() if k in keep}


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    """A list, a page at a time: pass `next_cursor` back for the next page (null: no more)."""

    items: list[T]
    next_cursor: str | None = None


# -- converters from the stored models ----------------------------------------------------


def fact_status(fact: Fact, at: datetime | None = None) -> FactStatus:
    """contested when held for review; closed when its validity ended by `at` (now) or this
    version was retired; else current."""
    e = fact.edge
    if e.status is EdgeStatus.contested:
        return "contested"
    at = at or datetime.now(UTC)
    ended = e.invalid_at is not None and e.invalid_at <= at
    return "closed" if ended or e.expired_at is not None else "current"


def fact_view(fact: Fact, *, at: datetime | None = None) -> FactView:
    """The view of one fact version; `at` (default now) decides current vs closed."""
    e = fact.edge
    return FactView(
        id=e.fact_uuid,
        subject=fact.subject,
        predicate=fact.predicate,
        object=fact.object,
        text=e.fact,
        valid_from=e.valid_at,
        valid_to=e.invalid_at,
        known_from=e.created_at,
        known_to=e.expired_at,
        trust=cast(TrustWord, e.trust.name),
        status=fact_status(fact, at),
        episode_id=e.episodes[0] if e.episodes else None,
        closed_by_episode_id=e.invalidated_by,
    )


def episode_view(episode: EpisodicNode) -> EpisodeView:
    return EpisodeView(
        id=episode.uuid,
        name=episode.name,
        source=episode.source.value,
        channel=episode.channel.value,
        reference_time=episode.valid_at,
        created_at=episode.created_at,
        status=episode.status.value,
    )


def entity_view(entity: EntityNode) -> EntityView:
    return EntityView(
        id=entity.uuid, name=entity.name, labels=list(entity.labels), summary=entity.summary
    )


def fact_hit(fact: Fact, score: float, *, closed: bool | None = None) -> HitView:
    """A fact hit; `closed` is the search's own verdict at its view time, when it has one."""
    view = fact_view(fact)
    if closed is not None and view.status != "contested":
        view.status = "closed" if closed else "current"
    return HitView(kind="fact", score=score, **view.model_dump())


def episode_hit(episode: EpisodicNode, score: float) -> HitView:
    return HitView(
        kind="episode", score=score, text=episode.content, **episode_view(episode).model_dump()
    )


def entity_hit(entity: EntityNode, score: float) -> HitView:
    return HitView(
        kind="entity",
        id=entity.uuid,
        score=score,
        text=entity.summary or entity.name,
        name=entity.name,
        labels=list(entity.labels),
    )


def community_hit(community: CommunityNode, score: float) -> HitView:
    return HitView(
        kind="community",
        id=community.uuid,
        score=score,
        text=community.summary or community.name,
        name=community.name,
    )


# -- search results, read by shape (retrieval's models sit above this layer) ---------------


class _Scored(Protocol):
    @property
    def score(self) -> float: ...


class _FactHit(_Scored, Protocol):
    @property
    def fact(self) -> Fact: ...
    @property
    def closed(self) -> bool: ...


class _EpisodeHit(_Scored, Protocol):
    @property
    def episode(self) -> EpisodicNode: ...


class _EntityHit(_Scored, Protocol):
    @property
    def entity(self) -> EntityNode: ...


class _CommunityHit(_Scored, Protocol):
    @property
    def community(self) -> CommunityNode: ...


class _Results(Protocol):
    @property
    def facts(self) -> Sequence[_FactHit]: ...
    @property
    def episodes(self) -> Sequence[_EpisodeHit]: ...
    @property
    def entities(self) -> Sequence[_EntityHit]: ...
    @property
    def communities(self) -> Sequence[_CommunityHit]: ...


def hit_views(results: _Results) -> list[HitView]:
    """Every hit of a search (`kg.retrieval.SearchResults`), best score first."""
    hits = [fact_hit(h.fact, h.score, closed=h.closed) for h in results.facts]
    hits += [episode_hit(h.episode, h.score) for h in results.episodes]
    hits += [entity_hit(h.entity, h.score) for h in results.entities]
    hits += [community_hit(h.community, h.score) for h in results.communities]
    return sorted(hits, key=lambda h: -h.score)
