"""One request model per operation (kg.schemas.requests; search's SearchRequest), and every
surface spelling it the same: `KG`'s keywords, `AsyncClient`'s, the HTTP body or query in
the OpenAPI document, and the MCP tool's arguments. A field added to one surface and not the
others fails here; what a surface adds or leaves out on purpose is listed, with why."""

from __future__ import annotations

import contextlib
import inspect
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel

from kg.client import AsyncClient
from kg.errors import InputError
from kg.facade import KG
from kg.retrieval.request import ContextRequest, SearchRequest
from kg.schemas.requests import (
    AddEpisodeRequest,
    EntitiesRequest,
    EpisodesRequest,
    EraseEntityRequest,
    EraseGroupRequest,
    FactsRequest,
    HistoryRequest,
    LogRequest,
    ReviewRequest,
    RollbackRequest,
)
from kg.server.app import create_app
from tests.mcp_golden import surface

# What every `KG` method takes beside its request: the group (a server's key decides it).
NOT_A_FIELD = {"group_id"}


@dataclass
class Operation:
    model: type[BaseModel]
    methods: tuple[str, ...]  # KG's (and AsyncClient's) methods taking it; () none
    http: str | None  # "METHOD /path" of the operation in the OpenAPI document
    mcp: str | None = None  # the MCP tool built on it
    renames: dict[str, str] = field(default_factory=dict)  # a surface's name -> the field's
    embedded_only: set[str] = field(default_factory=set)  # KG keywords HTTP/MCP do not take
    http_extra: set[str] = field(default_factory=set)  # what only the server asks (paging...)
    mcp_left_out: set[str] = field(default_factory=set)  # fields not offered to a model
    old: set[str] = field(default_factory=set)  # KG keywords kept one release (kg.schemas.names)


SERVER_DECIDES = {"channel", "trust"}  # the key's channel, unless lower (not a model's choice)
NOT_FOR_A_MODEL = {"recipe", "center", "min_score", "include_contested"}
LIBRARY_SEARCH = {"config", "seeds"}  # a SearchConfig and BFS seeds: a server takes recipes

OPERATIONS: dict[str, Operation] = {
    "add episode": Operation(
        AddEpisodeRequest,
        ("add_episode",),
        "POST /v1/episodes",
        "add_memory",
        embedded_only={"session_id", "turns", "after_seconds"},  # an idempotency key, debounce
        mcp_left_out=SERVER_DECIDES,
    ),
    "facts": Operation(
        FactsRequest, ("facts",), "GET /v1/facts", "facts_as_of", http_extra={"cursor"}
    ),
    "history": Operation(
        HistoryRequest, ("history",), "GET /v1/history", "fact_history", http_extra={"cursor"}
    ),
    "entities": Operation(
        EntitiesRequest,
        ("entities",),
        "GET /v1/entities",
        http_extra={"cursor"},
    ),
    "list episodes": Operation(EpisodesRequest, (), "GET /v1/episodes", "list_episodes"),
    "log": Operation(LogRequest, ("log",), "GET /v1/log", http_extra={"cursor"}),
    "review": Operation(ReviewRequest, ("review",), "GET /v1/review", http_extra={"cursor"}),
    "rollback": Operation(
        RollbackRequest,
        ("rollback", "rollback_source"),
        "POST /v1/rollback",
        "rollback_episode",
        renames={"episode_id": "episode_ids"},  # the tool undoes one episode a call
        mcp_left_out={"source_description", "since"},
        old={"apply"},
    ),
    "erase entity": Operation(
        EraseEntityRequest,
        ("erase_entity",),
        "POST /v1/erase/entity",
        "forget",
        http_extra={"confirm"},  # the subject again: a server erases only when confirmed
        old={"name"},
    ),
    "erase group": Operation(
        EraseGroupRequest,
        ("erase_group",),
        "POST /v1/erase/group",
        renames={"group_id": "confirm"},  # KG names the group; the server confirms its own
    ),
    "search": Operation(
        SearchRequest,
        ("search",),
        "POST /v1/search",
        "search_entities",
        embedded_only=LIBRARY_SEARCH,
        old={"include_history"},
        mcp_left_out={
            *NOT_FOR_A_MODEL,
            "valid_at",
            "known_at",
            "asked_at",
            "include_closed",
            "abstain_below",
            "abstain_joint_below",
        },  # search_entities finds entities; search_memory is the time-aware search
    ),
    "context": Operation(
        ContextRequest,
        ("context",),
        "POST /v1/context",
        "search_memory",  # a model reads its hits as a budgeted list
        embedded_only=LIBRARY_SEARCH,
        mcp_left_out=NOT_FOR_A_MODEL,
        old={"include_history"},
    ),
}


def _fields(op: Operation) -> set[str]:
    return set(op.model.model_fields)


def _renamed(names: set[str], op: Operation) -> set[str]:
    return {op.renames.get(n, n) for n in names}


def _keywords(cls: type, op: Operation) -> set[str]:
    """The names a class's methods for the operation take, its request itself left out."""
    names: set[str] = set()
    for method in op.methods:
        for p in inspect.signature(getattr(cls, method)).parameters.values():
            if p.name != "self" and p.kind is not p.POSITIONAL_ONLY:
                names.add(p.name)
    return _renamed(names, op) - NOT_A_FIELD - op.old


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    async def never() -> KG:
        raise AssertionError("the document needs no store")

    return create_app(never).openapi()


@pytest.fixture(scope="module")
def tools() -> dict[str, set[str]]:
    return {t["name"]: set(t["inputSchema"]["properties"]) for t in surface()["tools"]}


def _http_names(spec: dict[str, Any], where: str) -> set[str]:
    verb, path = where.split(" ", 1)
    op = spec["paths"][path][verb.lower()]
    names = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
    body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
    if ref := body.get("schema", {}).get("$ref"):
        schema = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
        names |= set(schema["properties"])
    return names


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_kg_and_the_client_take_the_request_fields(name: str) -> None:
    op = OPERATIONS[name]
    for cls in (KG, AsyncClient):
        expected = _fields(op) | op.embedded_only if op.methods else set()
        assert _keywords(cls, op) == expected, (cls, name)


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_http_takes_the_request_fields(name: str, openapi: dict[str, Any]) -> None:
    op = OPERATIONS[name]
    assert op.http is not None
    sent = _renamed(_http_names(openapi, op.http), op)
    assert sent == (_fields(op) - op.embedded_only) | op.http_extra, name


@pytest.mark.parametrize("name", [n for n, op in OPERATIONS.items() if op.mcp])
def test_mcp_tools_take_the_request_fields(name: str, tools: dict[str, set[str]]) -> None:
    op = OPERATIONS[name]
    assert op.mcp is not None
    offered = _renamed(tools[op.mcp], op)
    expected = (_fields(op) - op.embedded_only - op.mcp_left_out) | (op.http_extra - {"cursor"})
    assert offered == expected, name


def test_the_table_names_every_request_model() -> None:
    """A new request model is a new operation: it needs a row (and so every surface)."""
    import kg.schemas.requests as requests

    models = {
        m
        for m in vars(requests).values()
        if isinstance(m, type) and issubclass(m, requests.Request) and m is not requests.Request
    }
    assert models <= {op.model for op in OPERATIONS.values()}


async def test_a_model_or_its_keywords_never_both(mem: KG) -> None:
    """KG takes the request or its fields; both is a TypeError, a bad field one InputError."""
    with pytest.raises(TypeError, match="not both"):
        await mem.facts(FactsRequest(subject="Ann"), subject="Bob")
    with pytest.raises(InputError, match=r"^invalid facts query: limit: .*less than or equal"):
        await mem.facts(limit=10**30)
    assert await mem.facts(FactsRequest(subject="Ann")) == await mem.facts(subject="Ann")


async def test_the_client_sends_what_the_server_model_reads() -> None:
    """AsyncClient's body or query of each call is its request model's JSON, which the
    server's model of the operation reads back as the same request."""
    import httpx

    from kg.server import models

    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/whoami":
            who = {"group_id": "g", "role": "admin", "key_id": "k", "channel": "user"}
            return httpx.Response(200, json=who)
        sent.append(request)
        if request.method == "GET":
            return httpx.Response(200, json={"items": [], "next_cursor": None})
        problem = {"title": "stop", "status": 400, "detail": "recorded"}
        return httpx.Response(400, json=problem)

    calls: list[tuple[str, type[BaseModel], dict[str, Any]]] = []
    async with AsyncClient("http://kg.test", "key", transport=httpx.MockTransport(answer)) as c:

        async def call(model: type[BaseModel], expected: dict[str, Any], work: Any) -> None:
            with contextlib.suppress(InputError):  # the answer to a write: recorded, stop
                await work
            calls.append((sent[-1].url.path, model, expected))

        await call(
            models.AddEpisode,
            {
                "source": "text",
                "content": "hi",
                "reference_time": "2024-03-01T00:00:00Z",
                "extract": True,  # KG's default: extract, or refuse without an LLM
            },
            c.add_episode(source="text", content="hi", reference_time="2024-03-01"),
        )
        await call(
            models.FactsPage,
            {"subject": "Ann", "valid_at": "2021-01-01T00:00:00Z", "include_contested": True},
            c.facts(subject="Ann", valid_at="2021", include_contested=True),
        )
        await call(models.HistoryPage, {"predicate": "LIVES_IN"}, c.history(predicate="LIVES_IN"))
        await call(models.EntitiesPage, {"contains": "an"}, c.entities(contains="an"))
        await call(
            models.RollbackRequest,
            {"source_description": "web", "since": "2024-01-01T00:00:00Z", "dry_run": False},
            c.rollback_source("web", since="2024", dry_run=False),
        )
        await call(
            models.EraseEntityRequest,
            {"subject": "Ann", "dry_run": True, "confirm": "Ann"},
            c.erase_entity("Ann", dry_run=True),
        )
        await call(models.EraseGroupRequest, {"confirm": "g"}, c.erase_group("g"))
        await call(
            models.ContextRequest,
            {"query": "where", "max_tokens": 200, "include_closed": True},
            c.context("where", max_tokens=200, include_closed=True),
        )
    for request, (path, model, expected) in zip(sent, calls, strict=True):
        assert request.url.path == path
        if request.method == "GET":
            given = {k: v for k, v in request.url.params.items() if k not in ("limit", "cursor")}
        else:
            given = json.loads(request.content)
        read = model.model_validate(given)
        assert read == model.model_validate(expected), (path, given)


async def test_kg_takes_each_request_as_its_keywords(mem: KG) -> None:
    """The model and its keywords are one call: the same episode, the same answers."""
    said = [{"subject": "Ann", "predicate": "LIVES_IN", "object": "Oslo"}]
    when = "2024-03-01"
    by_model = await mem.add_episode(
        AddEpisodeRequest(source="facts", facts=said, reference_time=when)  # type: ignore[arg-type]
    )
    again = await mem.add_episode(source="facts", facts=said, reference_time=when)
    assert again.status == "duplicate" and again.episode_uuid == by_model.episode_uuid
    with pytest.raises(TypeError, match="not both"):
        await mem.add_episode(AddEpisodeRequest(source="facts", facts=said), name="x")  # type: ignore[arg-type]
    assert await mem.history(HistoryRequest(subject="Ann")) == await mem.history(subject="Ann")
    plan = await mem.rollback(RollbackRequest(episode_ids=[by_model.episode_uuid]))
    assert plan == await mem.rollback(by_model.episode_uuid)
    assert not plan.applied and plan.episodes == [by_model.episode_uuid]
    with pytest.raises(TypeError, match="not both"):
        await mem.erase_entity(EraseEntityRequest(subject="Ann"), dry_run=True)
