"""`kg.toml`: the options an environment variable sets, set in a file instead.

A key is its environment variable's name in lower case without `KG_` (`KG_LLM_MODEL` ->
`llm_model`, `OPENAI_API_KEY` -> `openai_api_key`); a value is a TOML string, number,
boolean or (for a repeatable option) list. The file is the one `--config` or `KG_CONFIG`
names, else `kg.toml` in the data directory (`--home`, `KG_HOME`, default ~/.kg) if there
is one. It reaches the commands as click's `default_map`, so a flag beats the environment,
which beats the file, which beats the option's default. An unknown key or a malformed file is
a one-line error naming the file: nothing runs on a configuration half read.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kg.errors import InputError

NAME = "kg.toml"
OWN = "KG_CONFIG"  # names the file: not a key in it
# Global options that take a value: skipped over while looking for --config and --home.
_VALUED = {
    "--home",
    "--uri",
    "--stores",
    "--placement",
    "--group",
    "--ontology",
    "--embedder",
    "--durability",
    "--config",
}


@dataclass
class ConfigFile:
    """The file found (or none), how it was found, and its values by environment variable."""

    path: Path | None
    how: str  # "--config", "KG_CONFIG", "data directory", or "" (none)
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Setting:
    """One option an environment variable sets: where it is (a command path and the
    parameter), its key in the file."""

    envvar: str
    path: tuple[str, ...]  # () for the global options, ("serve",), ("keys", "create")...
    param: Any  # a click Parameter (typer vendors its own click)

    @property
    def key(self) -> str:
        return key_of(self.envvar)


def key_of(envvar: str) -> str:
    return envvar.lower().removeprefix("kg_")


def settings(command: Any, path: tuple[str, ...] = ()) -> Iterator[Setting]:
    """Every option of `command` and its subcommands that an environment variable sets."""
    for param in command.params:
        if isinstance(param.envvar, str) and param.envvar != OWN:
            yield Setting(param.envvar, path, param)
    if hasattr(command, "commands"):  # a group
        for name, sub in sorted(command.commands.items()):
            yield from settings(sub, (*path, name))


def global_flags(argv: Sequence[str]) -> dict[str, str]:
    """The global options given before the command (`kg --home X --config Y serve`)."""
    found: dict[str, str] = {}
    tokens = iter(argv)
    for token in tokens:
        if not token.startswith("-"):
            break
        name, eq, value = token.partition("=")
        if name in _VALUED and not eq:
            value = next(tokens, "")
        found[name] = value
    return found


def find(flags: Mapping[str, str], environ: Mapping[str, str]) -> ConfigFile:
    """The configuration file read, loaded: named by the `--config` flag (in `flags`, the
    global flags given), else by KG_CONFIG, else kg.toml in the data directory."""
    for how, named in (("--config", flags.get("--config")), (OWN, environ.get(OWN))):
        if named:
            path = Path(named).expanduser()
            if not path.is_file():
                raise InputError(f"{how} {named}: no such file")
            return ConfigFile(path, how, load(path))
    home = flags.get("--home") or environ.get("KG_HOME") or str(Path.home() / ".kg")
    path = Path(home).expanduser() / NAME
    if path.is_file():
        return ConfigFile(path, "data directory", load(path))
    return ConfigFile(None, "")


def load(path: Path) -> dict[str, Any]:
    """The file's values by key; a file that is not TOML is a one-line error naming it."""
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a readable TOML file: {exc}") from None


def default_map(command: Any, found: ConfigFile) -> dict[str, Any]:
    """The file's values as click's `default_map` for `command` (nested by subcommand)."""
    by_key: dict[str, list[Setting]] = {}
    for s in settings(command):
        by_key.setdefault(s.key, []).append(s)
    unknown = sorted(set(found.values) - set(by_key))
    if unknown:
        known = ", ".join(sorted(by_key))
        raise InputError(f"{found.path}: unknown key {unknown[0]!r}; the keys are: {known}")
    out: dict[str, Any] = {}
    for key, value in found.values.items():
        if isinstance(value, dict):
            raise InputError(f"{found.path}: {key}: a value, not a table")
        for s in by_key[key]:
            level = out
            for name in s.path:
                level = level.setdefault(name, {})
            assert s.param.name is not None
            multiple = getattr(s.param, "multiple", False)
            level[s.param.name] = [value] if multiple and isinstance(value, str) else value
    return out


def defaults_for(command: Any, argv: Sequence[str]) -> dict[str, Any]:
    """`default_map` for this command line and the process's environment."""
    return default_map(command, find(global_flags(argv), os.environ))
