"""What the client sends: each call's request model (kg.schemas.requests, and search's
`SearchRequest`), validated as `KG` validates it (kg.arguments), dumped as the body or the
query; the arguments only the embedded engine takes are refused by name (the server decides
them: the key's group, a named recipe)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from kg.arguments import context_request, search_request
from kg.errors import InputError
from kg.retrieval.request import SearchRequest
from kg.schemas.episode import Episode
from kg.schemas.requests import AddEpisodeRequest

# Request fields the server does not take: a `SearchConfig` and BFS `seeds` (a server
# searches by named recipe).
_LIBRARY_ONLY = ("config", "seeds")


def not_offered(what: str, name: str) -> InputError:
    return InputError(f"{name}: {what} is not offered over HTTP; use the embedded KG for it")


def episode_body(ep: Episode, *, extract: bool, wait: bool) -> dict[str, Any]:
    """The episode as `POST /v1/episodes` takes it: its `AddEpisodeRequest`. Its channel and
    trust are sent only when the caller set them: otherwise the key's channel applies (the
    server's ceiling)."""
    for name in ("session_id", "turns"):
        if getattr(ep, name) is not None:
            raise not_offered("an idempotency key (session_id, turns)", name)
    unset = {"channel", "trust"} - ep.model_fields_set
    fields = set(AddEpisodeRequest.model_fields) - unset
    given = {k: getattr(ep, k) for k in fields if hasattr(ep, k)}
    request = AddEpisodeRequest(**given, extract=extract, wait=wait)
    return body(request)


def body(request: BaseModel) -> dict[str, Any]:
    """A request as JSON: fields left unset (None) left out."""
    return request.model_dump(mode="json", exclude_none=True)


def query(request: BaseModel, *exclude: str) -> dict[str, Any]:
    """A request as query parameters: only what differs from its defaults."""
    return request.model_dump(mode="json", exclude_defaults=True, exclude=set(exclude))


def _refuse_library_only(request: SearchRequest) -> None:
    for name in _LIBRARY_ONLY:
        if getattr(request, name):
            raise not_offered("a search config (use a named recipe)", name)


def search_body(query: str | SearchRequest, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A `KG.search` call's arguments (by name, from its locals) as `POST /v1/search`'s
    body: the `SearchRequest` `KG.search` validates (`kg.arguments.search_request`)."""
    request = search_request(query, arguments)
    _refuse_library_only(request)
    sent = request.model_dump(mode="json", exclude_defaults=True, exclude=set(_LIBRARY_ONLY))
    return {**sent, "query": request.query}


def context_body(query: str | SearchRequest, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """`KG.context`'s arguments as `POST /v1/context`'s body: its `ContextRequest`."""
    request = context_request(query, arguments)
    _refuse_library_only(request)
    sent = request.model_dump(mode="json", exclude_defaults=True, exclude=set(_LIBRARY_ONLY))
    return {**sent, "query": request.query, "max_tokens": request.max_tokens}
