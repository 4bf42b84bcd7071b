"""`kg`: the command line. Every error is one line naming the problem, with a non-zero exit."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ingest.structured import check_structured
from kg.errors import InputError, KGError, validation_message
from kg.facade import KG
from kg.times import parse_time
from schemas.episode import Episode, EpisodeSource
from schemas.graph import Fact
from schemas.ontology import DEFAULT_ONTOLOGY, Ontology

T = TypeVar("T")

app = typer.Typer(
    name="kg",
    help="Bi-temporal knowledge-graph memory: what was true when, and what we knew when.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


@dataclass
class Settings:
    home: Path | None
    uri: str | None
    group: str
    ontology_path: Path | None

    def ontology(self) -> Ontology:
        if self.ontology_path is None:
            return DEFAULT_ONTOLOGY
        try:
            return Ontology.model_validate_json(self.ontology_path.read_text())
        except OSError as exc:
            raise InputError(f"ontology {self.ontology_path}: {exc.strerror}") from None
        except ValidationError as exc:
            raise InputError(f"ontology {self.ontology_path}: {validation_message(exc)}") from None

    async def open(self) -> KG:
        return await KG.open(self.uri, home=self.home, ontology=self.ontology())


def _fail(message: str) -> typer.Exit:
    err.print(f"[bold red]kg: error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code=1)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        return asyncio.run(coro)
    except KGError as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        raise _fail("interrupted; episodes already ingested are kept, re-run to resume") from None


async def _with_kg(settings: Settings, work: Callable[[KG], Awaitable[T]]) -> T:
    kg = await settings.open()
    try:
        return await work(kg)
    finally:
        await kg.close()


def _time(value: str | None, name: str) -> datetime | None:
    return None if value is None else parse_time(value, field=name)


@app.callback()
def main_options(
    ctx: typer.Context,
    home: Annotated[
        Path | None,
        typer.Option(envvar="KG_HOME", help="Embedded data directory (default: ~/.kg)."),
    ] = None,
    uri: Annotated[
        str | None,
        typer.Option(
            envvar="KG_URI",
            help="Store: 'embedded' (default), falkordb://host:port, bolt:// or neo4j://.",
        ),
    ] = None,
    group: Annotated[str, typer.Option(envvar="KG_GROUP", help="Group (tenant) id.")] = "default",
    ontology: Annotated[
        Path | None, typer.Option(envvar="KG_ONTOLOGY", help="Ontology JSON file.")
    ] = None,
) -> None:
    ctx.obj = Settings(home=home, uri=uri, group=group, ontology_path=ontology)


# -- ingest ---------------------------------------------------------------------------------


def read_episodes(path: Path | None, text: str, group: str, ontology: Ontology) -> list[Episode]:
    """Parse and validate every line before anything is written: a bad line means no writes."""
    name = str(path) if path else "<stdin>"
    episodes: list[Episode] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: malformed JSON: {exc.msg} at column {exc.colno}") from None
        if not isinstance(data, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(data).__name__}")
        data.setdefault("group_id", group)
        try:
            episode = Episode.model_validate(data)
        except ValidationError as exc:
            raise InputError(f"{where}: {validation_message(exc)}") from None
        if episode.source is not EpisodeSource.facts:
            raise InputError(
                f"{where}: {episode.source.value!r} episodes need an LLM extractor, which this "
                "version of kg does not include yet"
            )
        try:
            check_structured(episode, ontology)
        except ValueError as exc:
            raise InputError(f"{where}: {exc}") from None
        episodes.append(episode)
    if not episodes:
        raise InputError(f"{name}: no episodes found")
    # Reference-time order per group, so supersedes happen in the order the world saw them.
    return sorted(episodes, key=lambda e: (e.group_id, e.reference_time))


@app.command()
def ingest(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="JSON Lines of episodes, or '-' for stdin.")],
) -> None:
    """Ingest episodes from a JSON Lines file (validated in full before any write)."""
    settings: Settings = ctx.obj

    async def work(kg: KG) -> None:
        totals = {"added": 0, "duplicate": 0, "facts": 0, "closed": 0, "contested": 0}
        with Progress(
            TextColumn("ingesting"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
        ) as progress:
            task = progress.add_task("ingest", total=len(episodes))
            for ep in episodes:
                r = await kg.add_episode(ep)
                totals[r.status] += 1
                totals["facts"] += r.summary.facts_added
                totals["closed"] += r.summary.facts_closed
                totals["contested"] += r.summary.facts_contested
                progress.advance(task)
        out.print(
            f"ingested {totals['added']} episodes ({totals['duplicate']} already present): "
            f"{totals['facts']} facts added, {totals['closed']} closed, "
            f"{totals['contested']} contested"
        )

    try:
        if file == "-":
            path, text = None, sys.stdin.read()
        else:
            path = Path(file)
            text = path.read_text(encoding="utf-8")
        episodes = read_episodes(path, text, settings.group, settings.ontology())
    except OSError as exc:
        raise _fail(f"cannot read {file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise _fail(f"{file}: not UTF-8 text") from None
    except KGError as exc:
        raise _fail(str(exc)) from None
    _run(_with_kg(settings, work))


# -- reads ----------------------------------------------------------------------------------


def _interval(start: datetime, end: datetime | None) -> str:
    def fmt(d: datetime) -> str:
        # All times are UTC; midnight is shown as a bare date.
        return d.strftime("%Y-%m-%d" if d.time() == datetime.min.time() else "%Y-%m-%d %H:%M:%S")

    return f"{fmt(start)} → {fmt(end) if end else 'now'}"


def print_facts(facts: list[Fact], *, as_json: bool, title: str, transaction: bool = False) -> None:
    if as_json:
        out.print_json(json.dumps([f.as_row() for f in facts]))
        return
    if not facts:
        out.print(f"{title}: no facts")
        return
    table = Table(title=title, title_justify="left")
    for col in ("subject", "predicate", "object", "valid"):
        table.add_column(col)
    if transaction:
        table.add_column("believed")
    table.add_column("trust")
    table.add_column("note")
    for f in facts:
        e = f.edge
        note = []
        if e.status.value == "contested":
            note.append("contested")
        if e.invalidated_by:
            note.append(f"closed by episode {e.invalidated_by[:8]}")
        row = [f.subject, f.predicate, f.object, _interval(e.valid_at, e.invalid_at)]
        if transaction:
            row.append(_interval(e.created_at, e.expired_at))
        table.add_row(*row, e.trust.name, ", ".join(note))
    out.print(table)


SubjectOpt = Annotated[str | None, typer.Option(help="Subject entity name.")]
PredicateOpt = Annotated[str | None, typer.Option(help="Predicate, e.g. LIVES_IN.")]
ObjectOpt = Annotated[str | None, typer.Option("--object", help="Object entity name.")]
KnownAtOpt = Annotated[
    str | None, typer.Option(help="Transaction time: as kg knew it then (default: now).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _facts_command(
    settings: Settings,
    subject: str | None,
    predicate: str | None,
    obj: str | None,
    valid_at: str | None,
    known_at: str | None,
    contested: bool,
    as_json: bool,
) -> None:
    try:
        v, k = _time(valid_at, "valid-at"), _time(known_at, "known-at")
    except KGError as exc:
        raise _fail(str(exc)) from None

    async def work(kg: KG) -> list[Fact]:
        return await kg.facts(
            group_id=settings.group, subject=subject, predicate=predicate, object=obj,
            valid_at=v, known_at=k, include_contested=contested,
        )  # fmt: skip

    facts = _run(_with_kg(settings, work))
    title = f"true at {valid_at or 'now'}, as known at {known_at or 'now'}"
    print_facts(facts, as_json=as_json, title=title)


@app.command()
def facts(
    ctx: typer.Context,
    subject: SubjectOpt = None,
    predicate: PredicateOpt = None,
    object_: ObjectOpt = None,
    valid_at: Annotated[
        str | None, typer.Option(help="Valid time: what was true then (default: now).")
    ] = None,
    known_at: KnownAtOpt = None,
    contested: Annotated[bool, typer.Option(help="Include contested facts.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Facts true now (or at --valid-at), as known now (or at --known-at)."""
    _facts_command(ctx.obj, subject, predicate, object_, valid_at, known_at, contested, as_json)


@app.command("as-of")
def as_of(
    ctx: typer.Context,
    when: Annotated[str, typer.Argument(help="Valid time, e.g. 2024-03-15 or 2024-03-15T09:00Z.")],
    subject: SubjectOpt = None,
    predicate: PredicateOpt = None,
    object_: ObjectOpt = None,
    known_at: KnownAtOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What was true at WHEN ("what was true in March"), as known now or at --known-at."""
    _facts_command(ctx.obj, subject, predicate, object_, when, known_at, False, as_json)


@app.command()
def history(
    ctx: typer.Context,
    subject: SubjectOpt = None,
    predicate: PredicateOpt = None,
    object_: ObjectOpt = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000)] = 1000,
    as_json: JsonOpt = False,
) -> None:
    """Every version of the matching facts: valid interval, belief interval, provenance."""
    settings: Settings = ctx.obj

    async def work(kg: KG) -> list[Fact]:
        return await kg.history(
            group_id=settings.group, subject=subject, predicate=predicate, object=object_,
            limit=limit,
        )  # fmt: skip

    print_facts(_run(_with_kg(settings, work)), as_json=as_json, title="history", transaction=True)


@app.command()
def stats(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Counts for the group: episodes, entities, fact versions, current and contested facts."""
    settings: Settings = ctx.obj
    s = _run(_with_kg(settings, lambda kg: kg.stats(settings.group)))
    if as_json:
        out.print_json(s.model_dump_json())
        return
    table = Table(title=f"group {s.group_id}", title_justify="left", show_header=False)
    for key, value in s.model_dump(exclude={"group_id"}).items():
        table.add_row(key.replace("_", " "), str(value))
    out.print(table)


@app.command()
def demo() -> None:
    """A self-contained tour in a throwaway data directory: supersede, history, as-of."""
    from kg.demo import run_demo

    home = Path(tempfile.mkdtemp(prefix="kg-demo-"))
    try:
        _run(run_demo(home, out))
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
