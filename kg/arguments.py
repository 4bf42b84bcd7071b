"""How `KG`'s methods read their arguments: an operation's request (kg.schemas.requests, a
search's `SearchRequest`) or its keywords, validated once; an episode's fields, ids (whole or a
unique prefix), texts, and the deprecated `apply` beside `dry_run`. Each refusal is an
`InputError` naming the argument, before anything is read or written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from kg.errors import InputError, validation_message
from kg.retrieval.request import ContextRequest, SearchRequest
from kg.schemas.episode import Episode
from kg.schemas.names import deprecated
from kg.schemas.store import GraphStore
from kg.schemas.validation import check_text

R = TypeVar("R", bound=BaseModel)
ID_PREFIX = 6  # the shortest id prefix accepted for a whole id (tables show 8 characters)
UUID_LENGTH = 36
IdKind = Literal["episode", "fact"]
# The keyword arguments of `KG.add_episode` that are an `Episode`'s fields.
EPISODE_FIELDS = frozenset(
    {
        "source",
        "reference_time",
        "content",
        "facts",
        "group_id",
        "channel",
        "trust",
        "source_description",
        "name",
        "session_id",
        "turns",
    }
)
SourceName = Literal["message", "text", "json", "facts"]
ChannelName = Literal["user", "tool", "document", "agent"]


def episode_of(fields: dict[str, Any], where: str) -> Episode:
    try:
        return Episode.model_validate(fields)
    except ValidationError as exc:
        raise InputError(f"{where}: {validation_message(exc)}") from None


def checked_text(field: str, value: str) -> str:
    """A string argument the store can carry (no NUL, no lone surrogate), or an InputError."""
    try:
        return check_text(value)
    except ValueError as exc:
        raise InputError(f"{field}: {exc}") from None


def dry_run_of(dry_run: bool | None, apply: bool | None, default: bool = True) -> bool:
    """`dry_run`, or the deprecated `apply` read as its negation; `default` when neither."""
    if apply is not None:
        deprecated("apply", "dry_run (apply=True is dry_run=False)", stacklevel=4)
        if dry_run is not None and dry_run == apply:
            raise InputError("apply is the deprecated opposite of dry_run: give dry_run only")
        return not apply
    return default if dry_run is None else dry_run


def request_of(model: type[R], given: R | None, arguments: Mapping[str, Any], what: str) -> R:
    """The request a `KG` method was given, or the one its keyword arguments make (by name:
    its `locals()`), validated once: a refusal is one `InputError` naming the field. A
    keyword left at None or at the model's default is not given; a model and given keywords
    together are a TypeError (which would win?)."""
    fields = {
        k: v
        for k, v in arguments.items()
        if k in model.model_fields and v is not None and v != model.model_fields[k].default
    }
    if given is not None:
        if fields:
            raise TypeError(f"pass either a {model.__name__} or keyword fields, not both")
        return given
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        raise InputError(f"invalid {what}: {_refusals(exc)}") from None


def _refusals(exc: ValidationError) -> str:
    """pydantic's errors on one line, each once: 'limit: Input should be ...', a time's
    own message ('valid_at: ... is not a time'), a whole request's ('give ... or ...')."""
    parts = []
    for e in exc.errors():
        where = ".".join(str(p) for p in e["loc"])
        said = e["msg"].removeprefix("Value error, ")
        parts.append(said if not where or said.startswith(f"{where}: ") else f"{where}: {said}")
    return "; ".join(parts)


def search_request(query: str | SearchRequest, arguments: Mapping[str, Any]) -> SearchRequest:
    """The request given, or the one `KG.search`'s keyword arguments make: `request_of`,
    with the query a keyword like the others."""
    keywords = {k: v for k, v in arguments.items() if k != "query"}
    if isinstance(query, SearchRequest):
        return request_of(SearchRequest, query, keywords, "search")
    return request_of(SearchRequest, None, {**keywords, "query": query}, "search")


def context_request(query: str | SearchRequest, arguments: Mapping[str, Any]) -> ContextRequest:
    """`search_request` for `KG.context`: a search and its token budget. A plain
    `SearchRequest` is taken too, with the budget as a keyword."""
    keywords = {k: v for k, v in arguments.items() if k != "query"}
    if isinstance(query, ContextRequest):
        return request_of(ContextRequest, query, keywords, "context")
    if isinstance(query, SearchRequest):
        search_request(query, {k: v for k, v in keywords.items() if k != "max_tokens"})
        fields = {**query.model_dump(exclude_defaults=True), "query": query.query}
        keywords = {"max_tokens": keywords.get("max_tokens"), **fields}
    else:
        keywords["query"] = query
    return request_of(ContextRequest, None, keywords, "context")


async def resolve_id(store: GraphStore, group_id: str, kind: IdKind, id: str) -> str:
    """The whole id of the episode or fact that `id` names; a fact's prefix may be any
    version's. An id shorter than 6 characters, or one nothing starts with, comes back as
    given, for the caller's own not-found error; a prefix several ids start with is an
    InputError listing them (10 at most)."""
    id = checked_text(f"{kind} id", id)
    if not ID_PREFIX <= len(id) < UUID_LENGTH:
        return id
    found = await store.ids_by_prefix(group_id, kind, id, 11)
    if len(found) > 1:
        shown = ", ".join(found[:10]) + (", ..." if len(found) > 10 else "")
        raise InputError(
            f"{kind} id {id!r} is ambiguous in group {group_id!r}: it starts {shown}; "
            "give more characters"
        )
    return found[0] if found else id
