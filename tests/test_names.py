"""One name per concept on every surface (issue 24, kg.schemas.names): the CLI's visible
options never use another name of a concept, and the old names still work for one release
with a note. One walk covers the three surfaces a caller names things on: the CLI's
options, the OpenAPI document's parameters and request fields, and the MCP tools' arguments.
(test_server_conventions and test_mcp_golden also check the served document and tools.)"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main

from kg import KG
from kg.cli import app
from kg.retrieval.request import SearchRequest
from kg.schemas.names import CONCEPTS, OTHER_NAMES
from tests.conftest import add, t


def _commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    for name, sub in getattr(command, "commands", {}).items():
        yield [*path, name], sub
        yield from _commands(sub, [*path, name])


def cli_option_names() -> dict[str, list[str]]:
    """Every visible option of every command, as a field name: '--valid-at' -> 'valid_at'."""
    found: dict[str, list[str]] = {}
    for path, command in _commands(typer.main.get_command(app), ["kg"]):
        for p in command.params:
            if p.hidden or p.param_type_name != "option":
                continue
            for flag in [*p.opts, *p.secondary_opts]:
                name = flag.lstrip("-").replace("-", "_")
                found.setdefault(name, []).append(" ".join(path))
    return found


def test_the_cli_uses_one_name_per_concept() -> None:
    names = cli_option_names()
    other = {
        name: (OTHER_NAMES[name], where) for name, where in names.items() if name in OTHER_NAMES
    }
    assert not other, f"second names for one concept (name: (the one name, commands)): {other}"
    for concept in ("valid_at", "known_at", "include_closed", "include_contested", "subject"):
        assert concept in names, concept
    assert set(OTHER_NAMES) & set(CONCEPTS) == set()


def openapi_names(spec: dict[str, Any]) -> set[str]:
    """Every query, path parameter and request-body property an OpenAPI document offers."""
    schemas = spec.get("components", {}).get("schemas", {})
    names: set[str] = set()

    def walk(schema: dict[str, Any]) -> None:
        if "$ref" in schema:
            schema = schemas[schema["$ref"].rsplit("/", 1)[-1]]
        for name, sub in schema.get("properties", {}).items():
            names.add(name)
            walk(sub)
        for key in ("items", "anyOf", "allOf", "oneOf"):
            subs = schema.get(key, [])
            for sub in subs if isinstance(subs, list) else [subs]:
                walk(sub)

    for ops in spec["paths"].values():
        for op in ops.values():
            names |= {p["name"] for p in op.get("parameters", [])}
            for media in op.get("requestBody", {}).get("content", {}).values():
                walk(media["schema"])
    return names


def served_openapi() -> dict[str, Any]:
    """The document `kg serve` serves at /openapi.json (built without a store)."""
    from kg.server.app import ServeOptions, create_app

    async def no_store() -> KG:
        raise AssertionError("the document needs no store")

    spec: dict[str, Any] = create_app(no_store, ServeOptions()).openapi()
    return spec


def mcp_names(tools: list[dict[str, Any]]) -> set[str]:
    return {name for tool in tools for name in tool["inputSchema"]["properties"]}


def test_every_surface_uses_one_name_per_concept() -> None:
    """The CLI, the HTTP API and the MCP tools: no second name for a concept on any, and
    the one name of each concept wherever the concept is offered (docs/server.md's table)."""
    from tests.mcp_golden import surface

    surfaces = {
        "CLI": set(cli_option_names()),
        "HTTP": openapi_names(served_openapi()),
        "MCP": mcp_names(surface()["tools"]),
    }
    for where, names in surfaces.items():
        second = {n: OTHER_NAMES[n] for n in names if n in OTHER_NAMES}
        assert not second, f"{where} offers second names (name: the one name): {second}"
    everywhere = {
        "valid_at",
        "known_at",
        "include_closed",
        "include_contested",
        "subject",
        "dry_run",
        "wait",
        "extract",
    }
    for where, names in surfaces.items():
        assert everywhere <= names, (where, sorted(everywhere - names))
    assert "reference_time" in surfaces["HTTP"] & surfaces["MCP"]


def test_the_walks_catch_a_second_name_over_http_and_mcp() -> None:
    spec = {
        "paths": {"/v1/facts": {"get": {"parameters": [{"name": "include_history"}]}}},
        "components": {},
    }
    assert "include_history" in openapi_names(spec)
    tool = {"name": "forget", "inputSchema": {"properties": {"entity": {}}}}
    assert "entity" in mcp_names([tool]) and OTHER_NAMES["entity"] == "subject"


def test_the_walk_catches_a_second_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above fails where it should: a visible --as-of is a second valid_at."""
    command = typer.main.get_command(app).commands["search"]  # type: ignore[attr-defined]
    as_of = next(p for p in command.params if "--as-of" in p.opts)
    monkeypatch.setattr(as_of, "hidden", False)
    monkeypatch.setattr(typer.main, "get_command", lambda _app: _Root(command))
    assert "as_of" in cli_option_names()


class _Root:
    def __init__(self, search: Any) -> None:
        self.commands = {"search": search}


async def test_python_old_names_warn_and_still_work(mem: KG) -> None:
    first = await add(mem, t(2020), ("Alice", "LIVES_IN", "Paris"))
    await add(mem, t(2022), ("Alice", "LIVES_IN", "Berlin"))
    with pytest.warns(DeprecationWarning, match="apply is deprecated; use dry_run"):
        plan = await mem.rollback(first.episode_uuid, apply=False)
    assert not plan.applied
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not (await mem.rollback(first.episode_uuid)).applied  # default: a dry run
    with pytest.warns(DeprecationWarning, match="include_history is deprecated"):
        request = SearchRequest.model_validate({"query": "x", "include_history": True})
    assert request.include_closed is True
    assert SearchRequest(query="x", include_closed=True).include_closed


def test_every_command_has_json() -> None:
    """--json on every command whose answer is data (issue 24): not the servers, the demo's
    narrative, export (JSON Lines already) or tools (tool definitions, JSON already)."""
    missing = [
        " ".join(path)
        for path, command in _commands(typer.main.get_command(app), ["kg"])
        if not hasattr(command, "commands") and not any("--json" in p.opts for p in command.params)
    ]
    assert sorted(missing) == ["kg demo", "kg export", "kg mcp", "kg serve", "kg tools"]
