"""What the client sends: the bodies of `POST /v1/episodes` and `POST /v1/search` built
from `KG`'s own arguments, checked here as `KG` checks them, and the arguments only the
embedded engine takes refused by name (the server decides them: the key's group, a named
recipe)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from kg.errors import InputError, validation_message
from kg.retrieval.request import SearchRequest
from kg.schemas.episode import Episode

# Episode fields the server decides or does not take: the key's group, and the
# idempotency key (a session's turns), which the HTTP API does not offer yet.
_NOT_SENT = {"group_id", "session_id", "turns"}


def not_offered(what: str, name: str) -> InputError:
    return InputError(f"{name}: {what} is not offered over HTTP; use the embedded KG for it")


def episode(fields: Mapping[str, Any], where: str) -> Episode:
    """An episode from `add_episode`'s keywords or an `add_episodes` item, checked as `KG`
    checks it (naive times, a facts episode with no facts...) before anything is sent."""
    data = dict(fields)
    try:
        return Episode.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"{where}: {validation_message(exc)}") from None


def episode_body(ep: Episode, *, extract: bool, wait: bool) -> dict[str, Any]:
    """The episode as `POST /v1/episodes` takes it. Its channel and trust are sent only when
    the caller set them: otherwise the key's channel applies (the server's ceiling)."""
    for name in ("session_id", "turns"):
        if getattr(ep, name) is not None:
            raise not_offered("an idempotency key (session_id, turns)", name)
    unset = {"channel", "trust"} - ep.model_fields_set
    body = ep.model_dump(mode="json", exclude=_NOT_SENT | unset, exclude_none=True)
    body["facts"] = [f.model_dump(mode="json", exclude_none=True) for f in ep.facts]
    return {**body, "extract": extract, "wait": wait}


def search_body(query: str | SearchRequest, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A `KG.search` call's arguments (by name, from its locals) as `POST /v1/search`'s body:
    closed facts are `include_closed` on the wire; a `config` and `seeds` are the library's."""
    if isinstance(query, SearchRequest):
        given = query.model_dump(exclude_defaults=True)
        given["query"] = query.query
    else:
        fields = set(SearchRequest.model_fields) | {"include_closed"}
        given = {
            k: v for k, v in arguments.items() if k in fields and v is not None and v is not False
        }
        given["query"] = query
    for name in ("config", "seeds"):
        if given.get(name):
            raise not_offered("a search config (use a named recipe)", name)
        given.pop(name, None)
    if given.pop("include_history", False):
        given["include_closed"] = True
    try:
        checked = SearchRequest.model_validate(
            {k: v for k, v in given.items() if k != "include_closed"}
        )
    except ValidationError as exc:
        raise InputError(f"invalid search: {validation_message(exc)}") from None
    body = checked.model_dump(mode="json", exclude_defaults=True, exclude={"config", "seeds"})
    body["query"] = checked.query
    body.pop("include_history", None)
    if given.get("include_closed"):
        body["include_closed"] = True
    return body
