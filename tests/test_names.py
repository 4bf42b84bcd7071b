"""One name per concept on every surface (issue 24, kg.schemas.names): the CLI's visible
options never use another name of a concept, and the old names still work for one release
with a note. The server's tests extend the walk to the OpenAPI document and the MCP tools."""

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
