"""`kg config show`: every option an environment variable or `kg.toml` sets, its value for
this command line and where the value came from (flag, env, file, default), secrets masked."""

from __future__ import annotations

import json
import os
import re
from enum import Enum
from typing import Annotated, Any

import typer

from kg.cli import config_file, render
from kg.cli.config_file import ConfigFile, Setting
from kg.cli.render import SafeConsole, _table
from kg.errors import KGError

config_app = typer.Typer(
    help="The configuration: kg.toml, environment variables and flags.", no_args_is_help=True
)
ConfigOpt = Annotated[
    str | None,
    typer.Option(
        envvar=config_file.OWN,
        metavar="PATH",
        help="kg.toml to read (default: kg.toml in the data directory, if any): the same keys "
        "as the environment variables; flags and the environment win over it.",
    ),
]
MASK = "[redacted]"
_SECRET = re.compile(r"TOKEN|KEY|PASSWORD|SECRET")
_USERINFO = re.compile(r"(//[^/@:]*:)[^/@]*@")
# click's ParameterSource by name (typer vendors its own click)
_SOURCES = {"COMMANDLINE": "flag", "ENVIRONMENT": "env", "DEFAULT_MAP": "file"}


def shown(envvar: str, value: Any) -> Any:
    """The value as it may be printed: secrets masked, a URI's password cut out."""
    if isinstance(value, Enum):
        value = value.value
    if value is None or value == []:
        return None
    if _SECRET.search(envvar):
        return MASK
    if isinstance(value, str):
        return _USERINFO.sub(lambda m: m.group(1) + MASK + "@", value)
    return value if isinstance(value, int | float | bool | list) else str(value)


def source_of(root: Any, name: str) -> str:
    """Where a global option's value came from: flag, env, file or default."""
    found = root.get_parameter_source(name)
    return _SOURCES.get(getattr(found, "name", ""), "default")


def resolved(s: Setting, root: Any, found: ConfigFile) -> tuple[Any, str]:
    """(value, source) of one setting: the global options' from the running command line;
    a command's from the environment, the file, else its default."""
    name = s.param.name or ""
    if not s.path:
        return root.params.get(name), source_of(root, name)
    if os.environ.get(s.envvar):
        return os.environ[s.envvar], "env"
    if s.key in found.values:
        return found.values[s.key], "file"
    return s.param.get_default(root, call=True), "default"


def _flags(root: Any) -> dict[str, str]:
    """The global flags that find the file: those given on the command line only."""
    flags = {}
    for name in ("config", "home"):
        value = root.params.get(name)
        if value is not None and source_of(root, name) == "flag":
            flags[f"--{name}"] = str(value)
    return flags


def rows(root: Any, found: ConfigFile) -> list[dict[str, Any]]:
    """One row per environment variable, with the commands its option belongs to."""
    out: dict[str, dict[str, Any]] = {}
    for s in config_file.settings(root.command):
        where = " ".join(s.path) or "(global)"
        if s.envvar in out:
            out[s.envvar]["commands"].append(where)
            continue
        value, source = resolved(s, root, found)
        out[s.envvar] = {
            "key": s.key,
            "env": s.envvar,
            "value": shown(s.envvar, value),
            "source": source,
            "commands": [where],
        }
    return sorted(out.values(), key=lambda r: (r["commands"][0] != "(global)", r["key"]))


@config_app.command("show")
def show(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Every option kg.toml or an environment variable can set: its key in kg.toml, its
    variable, its value here and where that came from (flag > env > file > default).
    Secrets (tokens, API keys, a URI's password) are masked."""
    root = ctx.find_root()
    console = SafeConsole()
    try:
        found = config_file.find(_flags(root), os.environ)
    except KGError as exc:
        render.error(render.SafeConsole(stderr=True), str(exc))
        raise typer.Exit(1) from None
    table = rows(root, found)
    where = {"file": str(found.path) if found.path else None, "found_by": found.how or None}
    if as_json:
        console.print_json(json.dumps({**where, "settings": table}))
        return
    console.print(
        f"config file: {found.path} ({found.how})"
        if found.path
        else "config file: none (looked for kg.toml in the data directory)",
        soft_wrap=True,
        highlight=False,
    )
    out = _table(
        "settings (--json: the commands each belongs to)", ["key", "environment", "value", "source"]
    )
    for r in table:
        value = "" if r["value"] is None else str(r["value"])
        out.add_row(r["key"], r["env"], value, r["source"])
    console.print(out)
