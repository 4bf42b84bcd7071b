"""The CLI reference (docs/cli.md), rendered from the commands themselves.

The page is the `--help` of every command as Markdown: usage, description, and one row per
argument and option with its type and default. tests/test_cli_reference.py fails when the
committed page differs from what this renders, so a changed flag or help text cannot leave the
docs behind (sqlite-utils keeps its CLI reference the same way, with cog).

    python -m kg.cli.reference > docs/cli.md
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from enum import Enum
from typing import Any

import typer

HEADER = """\
# CLI reference

Generated from the commands' own help by `python -m kg.cli.reference > docs/cli.md`;
tests/test_cli_reference.py fails when this page and the code disagree. Every command takes
the global options of `kg` before its name (`kg --group alice facts --subject Minji`). Errors
are one line naming the problem, with exit code 1.
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _kind(param: Any, ctx: Any) -> str:
    if getattr(param, "is_flag", False):
        return "flag"
    shown = str(param.display_type(ctx)).strip("<>")
    return {"str": "text", "int range": "int", "list[str]": "text, repeatable"}.get(shown, shown)


def _default(param: Any) -> str:
    if param.required:
        return "required"
    value = param.default
    if param.param_type_name != "option" or value is None or callable(value):
        return ""
    if isinstance(value, Enum):
        value = value.value
    if param.is_flag:
        if not param.secondary_opts:
            return "" if value is False else "on"
        return f"`{(param.opts if value else param.secondary_opts)[0]}`"
    return f"`{value}`"


def _names(param: Any) -> str:
    if param.param_type_name != "option":
        return f"`{param.name.upper()}`" + (" ..." if param.nargs == -1 else "")
    names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
    return names + (f" (env `{param.envvar}`)" if isinstance(param.envvar, str) else "")


def _params(command: Any, ctx: Any) -> Iterator[str]:
    shown = [p for p in command.get_params(ctx) if not p.hidden and p.name != "help"]
    if not shown:
        return
    yield "| argument or option | type | default | what it does |"
    yield "|---|---|---|---|"
    for p in shown:
        text = getattr(p, "help", None) or ""
        yield f"| {_names(p)} | {_cell(_kind(p, ctx))} | {_default(p)} | {_cell(text)} |"
    yield ""


def _command(command: Any, path: list[str], parent: Any) -> Iterator[str]:
    ctx = type(parent or _root_context(command))(command, info_name=path[-1], parent=parent)
    usage = " ".join([*path, *command.collect_usage_pieces(ctx)])
    yield f"{'#' * min(len(path) + 1, 4)} `{' '.join(path)}`"
    yield ""
    yield f"```\n{usage}\n```"
    yield ""
    if command.help:
        yield command.help.replace("\b\n", "").strip()
        yield ""
    yield from _params(command, ctx)
    for name in command.list_commands(ctx) if hasattr(command, "list_commands") else ():
        sub = command.get_command(ctx, name)
        if sub is not None and not sub.hidden:
            yield from _command(sub, [*path, name], ctx)


def _root_context(command: Any) -> Any:
    return command.make_context("kg", [], resilient_parsing=True)


def render(app: typer.Typer) -> str:
    """The whole reference page for `app`, deterministic (no terminal width, no colour)."""
    lines = [HEADER]
    lines.extend(_command(typer.main.get_command(app), ["kg"], None))
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    from kg.cli.app import app

    sys.stdout.write(render(app))


if __name__ == "__main__":
    main()
