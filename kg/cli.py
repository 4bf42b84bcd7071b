"""`kg`: the command line. Every error is one line naming the problem, with a non-zero exit."""

from __future__ import annotations

import asyncio
import contextlib
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
from rich.text import Text

from kg.erasure import ErasureReceipt
from kg.errors import ExtractionError, InputError, KGError, json_object, validation_message
from kg.facade import KG
from kg.ingest.llm import StructuredLLM
from kg.ingest.structured import check_structured
from kg.retrieval import RECIPES, CrossEncoder, SearchResults, render_context
from kg.retrieval.context import quote
from kg.rollback import RollbackReport
from kg.schemas.embedder import Embedder
from kg.schemas.episode import Episode, EpisodeSource
from kg.schemas.graph import Fact
from kg.schemas.ontology import DEFAULT_ONTOLOGY, Ontology
from kg.times import parse_time

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
    embedder: str = "none"

    def ontology(self) -> Ontology:
        if self.ontology_path is None:
            return DEFAULT_ONTOLOGY
        try:
            return Ontology.model_validate_json(self.ontology_path.read_text())
        except OSError as exc:
            raise InputError(f"ontology {self.ontology_path}: {exc.strerror}") from None
        except ValidationError as exc:
            raise InputError(f"ontology {self.ontology_path}: {validation_message(exc)}") from None

    def make_embedder(self) -> Embedder | None:
        """'none', 'minilm' (the packaged all-MiniLM-L6-v2), or a sentence-transformers path."""
        if self.embedder in ("", "none"):
            return None
        from kg.ingest.embeddings import SentenceTransformerEmbedder, local_minilm

        try:
            if self.embedder == "minilm":
                return local_minilm()
            return SentenceTransformerEmbedder(self.embedder)
        except (OSError, RuntimeError, ValueError) as exc:
            raise InputError(f"embedder {self.embedder!r}: {exc}") from None

    async def open(
        self, cross_encoder: CrossEncoder | None = None, llm: StructuredLLM | None = None
    ) -> KG:
        return await KG.open(
            self.uri, home=self.home, ontology=self.ontology(), embedder=self.make_embedder(),
            cross_encoder=cross_encoder, llm=llm,
        )  # fmt: skip


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
    embedder: Annotated[
        str,
        typer.Option(
            envvar="KG_EMBEDDER",
            help="Embeddings for ingest and search: 'none', 'minilm' (packaged, offline) "
            "or a sentence-transformers model path.",
        ),
    ] = "none",
) -> None:
    ctx.obj = Settings(home=home, uri=uri, group=group, ontology_path=ontology, embedder=embedder)


# -- ingest ---------------------------------------------------------------------------------


def read_episodes(
    path: Path | None, text: str, group: str, ontology: Ontology, *, text_ok: bool = False
) -> list[Episode]:
    """Parse and validate every line before anything is written: a bad line means no writes."""
    name = str(path) if path else "<stdin>"
    episodes: list[Episode] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        data = json_object(line, where)
        data.setdefault("group_id", group)
        try:
            episode = Episode.model_validate(data)
        except ValidationError as exc:
            raise InputError(f"{where}: {validation_message(exc)}") from None
        if episode.source is not EpisodeSource.facts:
            if not text_ok:
                raise InputError(
                    f"{where}: {episode.source.value!r} episodes need an LLM (--llm-model, and "
                    "--llm-base-url for a local server) or --no-extract to store them as text"
                )
        else:
            try:
                check_structured(episode, ontology)
            except ValueError as exc:
                raise InputError(f"{where}: {exc}") from None
        episodes.append(episode)
    if not episodes:
        raise InputError(f"{name}: no episodes found")
    # Reference-time order per group, so supersedes happen in the order the world saw them.
    return sorted(episodes, key=lambda e: (e.group_id, e.reference_time))


LlmModelOpt = Annotated[
    str | None,
    typer.Option(envvar="KG_LLM_MODEL", help="Model for extraction, resolution, summaries."),
]
LlmBaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        envvar="KG_LLM_BASE_URL",
        help="OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp); default: OpenAI.",
    ),
]
LlmApiKeyOpt = Annotated[
    str | None,
    typer.Option(envvar="OPENAI_API_KEY", help="API key (env OPENAI_API_KEY).", show_default=False),
]


def _llm(model: str | None, base_url: str | None, api_key: str | None,
         concurrency: int = 4) -> StructuredLLM | None:  # fmt: skip
    if not model:
        return None
    from kg.ingest.llm import OpenAILLM

    return OpenAILLM(model, base_url=base_url, api_key=api_key, max_concurrency=concurrency)


@app.command()
def ingest(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="JSON Lines of episodes, or '-' for stdin.")],
    llm_model: LlmModelOpt = None,
    llm_base_url: LlmBaseUrlOpt = None,
    llm_api_key: LlmApiKeyOpt = None,
    no_extract: Annotated[
        bool,
        typer.Option("--no-extract", help="Store text episodes unextracted (searchable only)."),
    ] = False,
    concurrency: Annotated[
        int, typer.Option(min=1, max=64, help="Groups ingested in parallel.")
    ] = 4,
) -> None:
    """Ingest episodes from a JSON Lines file (validated in full before any write).

    Each group is ingested by one writer in reference-time order; up to --concurrency groups
    run at once. Re-running skips what is already in (by content hash), so an interrupted
    ingest resumes. A text episode whose extraction fails is recorded as failed and retried
    by the next run.
    """
    settings: Settings = ctx.obj
    if llm_model and no_extract:
        raise _fail("give --llm-model or --no-extract, not both")

    async def work(kg: KG) -> None:
        totals = dict.fromkeys(("added", "duplicate", "failed", "facts", "closed", "contested",
                                "llm_calls", "tokens"), 0)  # fmt: skip
        by_group: dict[str, list[Episode]] = {}
        for ep in episodes:
            by_group.setdefault(ep.group_id, []).append(ep)
        slots = asyncio.Semaphore(concurrency)
        with Progress(
            TextColumn("ingesting"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
        ) as progress:
            task = progress.add_task("ingest", total=len(episodes))

            async def one_group(group_episodes: list[Episode]) -> None:
                async with slots:
                    for ep in group_episodes:
                        try:
                            r = await kg.add_episode(ep, extract=not no_extract)
                        except ExtractionError:
                            totals["failed"] += 1
                        else:
                            s = r.summary
                            totals[r.status] += 1
                            totals["facts"] += s.facts_added
                            totals["closed"] += s.facts_closed
                            totals["contested"] += s.facts_contested
                            totals["llm_calls"] += s.llm_calls
                            totals["tokens"] += s.prompt_tokens + s.completion_tokens
                        progress.advance(task)

            await asyncio.gather(*(one_group(g) for g in by_group.values()))
        out.print(
            f"ingested {totals['added']} episodes ({totals['duplicate']} already present): "
            f"{totals['facts']} facts added, {totals['closed']} closed, "
            f"{totals['contested']} contested"
            + (f"; {totals['llm_calls']} LLM calls, {totals['tokens']} tokens"
               if totals["llm_calls"] else "")
            + (f"; {totals['failed']} failed extraction (recorded; re-run to retry)"
               if totals["failed"] else ""),
            soft_wrap=True,
        )  # fmt: skip
        if totals["failed"]:
            raise typer.Exit(code=1)

    try:
        if file == "-":
            path, text = None, sys.stdin.read()
        else:
            path = Path(file)
            text = path.read_text(encoding="utf-8")
        episodes = read_episodes(path, text, settings.group, settings.ontology(),
                                 text_ok=bool(llm_model) or no_extract)  # fmt: skip
    except OSError as exc:
        raise _fail(f"cannot read {file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise _fail(f"{file}: not UTF-8 text") from None
    except KGError as exc:
        raise _fail(str(exc)) from None
    llm = _llm(llm_model, llm_base_url, llm_api_key, concurrency)

    async def run() -> None:
        kg = await settings.open(llm=llm)
        try:
            await work(kg)
        finally:
            await kg.close()

    _run(run())


# -- reads ----------------------------------------------------------------------------------


def _interval(start: datetime, end: datetime | None) -> str:
    def fmt(d: datetime) -> str:
        # All times are UTC; midnight is shown as a bare date.
        return d.strftime("%Y-%m-%d" if d.time() == datetime.min.time() else "%Y-%m-%d %H:%M:%S")

    return f"{fmt(start)} → {fmt(end) if end else 'now'}"


def print_facts(
    facts: list[Fact],
    *,
    as_json: bool,
    title: str,
    transaction: bool = False,
    console: Console = out,
) -> None:
    if as_json:
        console.print_json(json.dumps([f.as_row() for f in facts]))
        return
    if not facts:
        console.print(f"{title}: no facts")
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
    console.print(table)


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
    """Counts for the group, what ingest did and cost, and what queries returned.

    Ingest: LLM calls and tokens, facts added / reinforced / closed / merged, facts and
    passages quarantined by the instruction guard (listed by `kg quarantine`), the share of
    LLM episodes that kept no fact. Queries: searches, hits per branch, latency, tokens
    injected by context renders (counted by every process that searched, saved on close).
    """
    settings: Settings = ctx.obj

    async def work(kg: KG) -> tuple[Any, Any]:
        return await kg.stats(settings.group), await kg.metrics(settings.group)

    s, m = _run(_with_kg(settings, work))
    ingest, queries = m.ingest, m.queries
    derived = {
        "ingest": {"llm_calls_per_episode": ingest.llm_calls_per_episode,
                   "empty_extraction_rate": ingest.empty_extraction_rate},
        "queries": {"mean_latency_ms": queries.mean_latency_ms,
                    "mean_context_tokens": queries.mean_context_tokens},
    }  # fmt: skip
    if as_json:
        body = s.model_dump(mode="json")
        body["ingest"] = ingest.model_dump() | derived["ingest"]
        body["queries"] = queries.model_dump() | derived["queries"]
        out.print_json(json.dumps(body))
        return
    table = Table(title=f"group {s.group_id}", title_justify="left", show_header=False)
    for key, value in s.model_dump(exclude={"group_id"}).items():
        table.add_row(key.replace("_", " "), str(value))
    for section, model in (("ingest", ingest), ("queries", queries)):
        table.add_section()
        values = model.model_dump(exclude={"branch_hits"}) | derived[section]
        for key, value in values.items():
            shown = f"{value:.3g}" if isinstance(value, float) else str(value)
            table.add_row(f"{section}: {key.replace('_', ' ')}", shown)
    for key, hits in sorted(queries.branch_hits.items()):
        table.add_row(f"queries: hits {key.replace('_', ' ')}", str(hits))
    out.print(table)


@app.command("adopt-graphiti")
def adopt_graphiti(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Adopt a group written by graphiti-core (same FalkorDB or Neo4j) for as-of views,
    `why` and rollback. Idempotent; see docs/graphiti.md for what it cannot restore."""
    settings: Settings = ctx.obj
    r = _run(_with_kg(settings, lambda kg: kg.adopt_graphiti(settings.group)))
    if as_json:
        out.print_json(r.model_dump_json())
        return
    if r.already_adopted:
        out.print(f"group {r.group_id}: already adopted, nothing new")
        return
    out.print(
        f"adopted group {r.group_id}: {r.entities} entities, {r.episodes} episodes, "
        f"{r.edges} edges; {r.closures} closures ({r.closures_unattributed} without a known "
        f"closing episode); {r.versions_created} versions created and {r.versions_deleted} "
        "replaced by replay" + (f"; {r.facts_skipped} facts skipped" if r.facts_skipped else ""),
        soft_wrap=True,
    )


# -- export and import ----------------------------------------------------------------------


@app.command("export")
def export_(
    ctx: typer.Context,
    output: Annotated[
        str, typer.Option("--output", "-o", help="File to write, or '-' for stdout.")
    ] = "-",
    no_embeddings: Annotated[
        bool, typer.Option("--no-embeddings", help="Leave vectors out (re-embed on import).")
    ] = False,
) -> None:
    """Export the group as JSON Lines: every episode, entity, fact version, community and
    audit event, with uuids, times and embeddings. Import it anywhere with `kg import`."""
    settings: Settings = ctx.obj
    target = None if output == "-" else Path(output)
    if target is not None and target.exists():
        raise _fail(f"{target} exists; not overwriting it")

    tmp = target.with_name(target.name + ".part") if target else None

    async def work(kg: KG) -> int:
        n = 0
        async for line in kg.export_lines(settings.group, embeddings=not no_embeddings):
            sink.write(line + "\n")
            n += 1
        return n

    try:
        sink = tmp.open("w", encoding="utf-8") if tmp else sys.stdout
        try:
            with contextlib.nullcontext() if tmp is None else sink:
                n = _run(_with_kg(settings, work))
        except BaseException:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
            raise
        if tmp is not None and target is not None:
            tmp.rename(target)  # a complete file or none
    except OSError as exc:
        raise _fail(f"cannot write {output}: {exc.strerror}") from None
    if target is not None:
        out.print(f"exported group {settings.group} to {target} ({n} lines)")


@app.command("import")
def import_(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="A `kg export` file, or '-' for stdin.")],
    into: Annotated[
        str | None, typer.Option(help="Group to create (default: the exported group's id).")
    ] = None,
) -> None:
    """Import a `kg export` file into a new group of this store (e.g. --uri bolt://...).

    Refuses a group that already exists; a malformed or truncated file leaves nothing behind.
    """
    settings: Settings = ctx.obj

    try:
        fh = sys.stdin if file == "-" else open(file, encoding="utf-8")  # noqa: SIM115
        with fh:
            source = "<stdin>" if file == "-" else file
            r = _run(_with_kg(settings, lambda kg: kg.import_lines(fh, into=into, source=source)))
    except OSError as exc:
        raise _fail(f"cannot read {file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise _fail(f"{file}: not UTF-8 text") from None
    counts = ", ".join(f"{v} {k}" for k, v in r.counts.items() if v)
    out.print(f"imported into group {r.group_id}: {counts}")


# -- communities ----------------------------------------------------------------------------

communities_app = typer.Typer(
    help="Communities: clusters of entities with summaries (the third layer).",
    no_args_is_help=True,
)
app.add_typer(communities_app, name="communities")


@communities_app.command("build")
def communities_build(
    ctx: typer.Context,
    llm_model: LlmModelOpt = None,
    llm_base_url: LlmBaseUrlOpt = None,
    llm_api_key: LlmApiKeyOpt = None,
    max_iterations: Annotated[
        int, typer.Option(min=1, max=1000, help="Label-propagation passes at most.")
    ] = 20,
    as_json: JsonOpt = False,
) -> None:
    """Cluster the facts true now and summarise each community.

    One LLM call per new or changed community with --llm-model; without it, extractive
    summaries (the facts themselves). Unchanged communities keep their summary.
    """
    settings: Settings = ctx.obj
    llm = _llm(llm_model, llm_base_url, llm_api_key)

    async def run() -> Any:
        kg = await settings.open(llm=llm)
        try:
            return await kg.build_communities(settings.group, max_iterations=max_iterations)
        finally:
            await kg.close()

    r = _run(run())
    if as_json:
        out.print_json(r.model_dump_json())
        return
    out.print(
        f"{r.communities} communities: {r.summarized} summarised, {r.kept} unchanged, "
        f"{r.deleted} replaced or removed"
        + (f"; {r.llm_calls} LLM calls, {r.prompt_tokens + r.completion_tokens} tokens"
           if r.llm_calls else "")
        + (f"; {len(r.errors)} summaries fell back to extractive" if r.errors else ""),
        soft_wrap=True,
    )  # fmt: skip


@communities_app.command("list")
def communities_list(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every community of the group: name, size, summary."""
    settings: Settings = ctx.obj
    found = _run(_with_kg(settings, lambda kg: kg.communities(settings.group)))
    if as_json:
        out.print_json(json.dumps([
            {**c.node.model_dump(mode="json", exclude={"name_embedding"}), "members": c.members}
            for c in found
        ]))  # fmt: skip
        return
    if not found:
        out.print("no communities; build them with `kg communities build`")
        return
    table = Table(title=f"communities of {settings.group}", title_justify="left")
    for col in ("name", "members", "summary", "stale"):
        table.add_column(col)
    for c in found:
        table.add_row(c.node.name, str(len(c.members)), c.node.summary,
                      "yes" if c.node.stale else "")  # fmt: skip
    out.print(table)


@app.command()
def quarantine(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """What the instruction guard held back from tools, documents and agents: facts never
    written and passages `context()` withholds, each with the rule it tripped and its episode.
    Also counted by `kg stats` (facts / passages quarantined)."""
    settings: Settings = ctx.obj
    held = _run(_with_kg(settings, lambda kg: kg.quarantine(settings.group)))
    if as_json:
        out.print_json(json.dumps([e.model_dump(mode="json") for e in held]))
        return
    if not held:
        out.print(Text(f"quarantine of {settings.group}: empty"))
        return
    table = Table(title=f"quarantine of {settings.group}", title_justify="left")
    for col in ("time", "channel", "kind", "rule", "text", "episode", "source"):
        table.add_column(col)
    for e in held:
        # Hostile by definition: quoted as data (controls and bidi escaped), never markup.
        table.add_row(e.created_at.strftime("%Y-%m-%d %H:%M:%S"), e.channel.value, e.item.kind,
                      e.item.reason, Text(quote(e.item.text)), e.episode_uuid,
                      Text(quote(e.source_description)))  # fmt: skip
    out.print(table)


# -- provenance: rollback, why, log, erase ---------------------------------------------------


def print_rollback(report: RollbackReport, console: Console = out) -> None:
    if report.noop:
        already = ", ".join(report.already_rolled_back)
        console.print(
            f"nothing to roll back{f' (already rolled back: {already})' if already else ''}"
        )
        return
    verb = "rolled back" if report.applied else "would roll back"
    console.print(f"{verb} {len(report.episodes)} episode(s): {', '.join(report.episodes)}")
    for title, rows, style in (("removed", report.removed, "red"),
                               ("re-opened / restored", report.restored, "green")):  # fmt: skip
        if not rows:
            continue
        table = Table(title=title, title_justify="left", title_style=style)
        for col in ("subject", "predicate", "object", "valid", "status"):
            table.add_column(col)
        for c in rows:
            table.add_row(c.subject, c.predicate, c.object, _interval(c.valid_at, c.invalid_at),
                          c.status)  # fmt: skip
        console.print(table)
    console.print(
        f"fact versions: {report.versions_deleted} deleted, {report.versions_reopened} re-opened, "
        f"{report.versions_created} created, {report.versions_kept} untouched"
    )
    if not report.applied:
        console.print("dry run: nothing changed. Re-run with --apply to carry it out.")


@app.command()
def rollback(
    ctx: typer.Context,
    episode_ids: Annotated[list[str] | None, typer.Argument(help="Episode uuid(s).")] = None,
    source_description: Annotated[
        str | None, typer.Option(help="Instead of ids: every episode from this source.")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="With --source-description: ingested since this time.")
    ] = None,
    apply: Annotated[bool, typer.Option("--apply", help="Carry out the plan.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Undo episodes as if never ingested: shows the plan; --apply carries it out atomically.

    Facts only they supported are deleted, facts they closed are re-opened (unless another
    episode also closed them), and reinforcements lose them. The episodes stay, marked rolled
    back, so re-sending them is still a no-op.
    """
    settings: Settings = ctx.obj
    if bool(episode_ids) == (source_description is not None):
        raise _fail("give episode ids or --source-description, not both and not neither")
    if since is not None and source_description is None:
        raise _fail("--since goes with --source-description")
    try:
        since_at = _time(since, "since")
    except KGError as exc:
        raise _fail(str(exc)) from None

    async def work(kg: KG) -> RollbackReport:
        if source_description is not None:
            return await kg.rollback_source(
                source_description, since=since_at, group_id=settings.group, apply=apply
            )
        return await kg.rollback(episode_ids or [], group_id=settings.group, apply=apply)

    report = _run(_with_kg(settings, work))
    if as_json:
        out.print_json(report.model_dump_json())
    else:
        print_rollback(report)


@app.command()
def replay(
    ctx: typer.Context,
    apply: Annotated[bool, typer.Option("--apply", help="Replace the live timelines.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Rebuild the group from its episode log with the current ontology; print the differences.

    --apply swaps in the rebuilt timelines atomically (e.g. after changing a cardinality).
    """
    settings: Settings = ctx.obj
    report = _run(_with_kg(settings, lambda kg: kg.replay(group_id=settings.group, apply=apply)))
    if as_json:
        out.print_json(report.model_dump_json())
        return
    out.print(f"replayed {report.episodes} episodes: {report.versions_matching} fact versions "
              f"match the live graph")  # fmt: skip
    if report.identical:
        out.print("the live graph equals its replay")
        return
    for label, rows in (("only in the live graph", report.only_in_graph),
                        ("only in the replay", report.only_in_replay)):  # fmt: skip
        for c in rows:
            out.print(f"  {label}: {c.subject} {c.predicate} {c.object} "
                      f"{_interval(c.valid_at, c.invalid_at)} ({c.status})")  # fmt: skip
    out.print(f"{report.versions_deleted} versions to delete, {report.versions_created} to create"
              + ("; applied" if report.applied else "; dry run, re-run with --apply"))  # fmt: skip


@app.command()
def why(ctx: typer.Context, fact_id: Annotated[str, typer.Argument(help="Fact or version uuid.")],
        as_json: JsonOpt = False) -> None:  # fmt: skip
    """A fact's versions and the episodes that created, reinforced and closed it."""
    settings: Settings = ctx.obj
    explanation = _run(_with_kg(settings, lambda kg: kg.why(fact_id, group_id=settings.group)))
    if as_json:
        out.print_json(explanation.model_dump_json())
        return
    print_facts(explanation.versions, as_json=False, title=f"versions of {fact_id}",
                transaction=True)  # fmt: skip
    table = Table(title="episodes", title_justify="left")
    for col in ("episode", "ingested", "reference time", "channel", "trust", "extractor",
                "source", "status"):  # fmt: skip
        table.add_column(col)
    for ep in explanation.episodes:
        table.add_row(ep.uuid, ep.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                      ep.valid_at.isoformat(), ep.channel.value, ep.trust.name, ep.extractor,
                      ep.source_description, ep.status.value)  # fmt: skip
    out.print(table)


@app.command("log")
def log_(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 100,
    closures: Annotated[bool, typer.Option(help="Include closures of facts.")] = True,
    as_json: JsonOpt = False,
) -> None:
    """The audit trail, newest first: rollbacks, erasures, and every closure of a fact."""
    settings: Settings = ctx.obj
    events = _run(_with_kg(settings, lambda kg: kg.log(group_id=settings.group, limit=limit,
                                                       closures=closures)))  # fmt: skip
    if as_json:
        out.print_json(json.dumps([e.model_dump(mode="json") for e in events]))
        return
    if not events:
        out.print("audit log: empty")
        return
    table = Table(title="audit log", title_justify="left")
    for col in ("time", "kind", "episodes", "detail"):
        table.add_column(col)
    for e in events:
        table.add_row(e.created_at.strftime("%Y-%m-%d %H:%M:%S"), e.kind,
                      ", ".join(e.episodes), e.detail)  # fmt: skip
    out.print(table)


@app.command()
def erase(
    ctx: typer.Context,
    entity: Annotated[str | None, typer.Option(help="Erase this subject from the group.")] = None,
    whole_group: Annotated[
        bool, typer.Option("--whole-group", help="Erase the entire group (--group).")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Physically delete a subject or a whole group, with its traces on disk. Not undoable."""
    settings: Settings = ctx.obj
    if (entity is None) == (not whole_group):
        raise _fail("give --entity NAME or --whole-group, not both and not neither")
    target = f"entity {entity!r}" if entity else f"the whole group {settings.group!r}"
    if not yes and not typer.confirm(f"Permanently erase {target} from group {settings.group!r}?"):
        raise _fail("not confirmed; nothing erased")

    async def work(kg: KG) -> ErasureReceipt:
        if entity is not None:
            return await kg.erase_entity(entity, group_id=settings.group)
        return await kg.erase_group(settings.group)

    receipt = _run(_with_kg(settings, work))
    out.print(
        f"erased {target}: {receipt.episodes_deleted} episodes, {receipt.entities_deleted} "
        f"entities, {receipt.fact_versions_deleted} fact versions deleted; "
        f"{receipt.other_facts_recomputed} other facts recomputed; store files compacted"
    )


def print_search(results: SearchResults, *, explain: bool, console: Console = out) -> None:
    if explain:
        table = Table(title="branches", title_justify="left")
        for col in ("scope", "method", "hits", "ms", "note"):
            table.add_column(col)
        for b in results.branches:
            table.add_row(b.scope.value, b.method, str(b.hits), f"{b.latency_ms:.1f}",
                          b.error or ("no hits" if b.hits == 0 else ""))  # fmt: skip
        console.print(table)
    sections: list[tuple[str, list[Any]]] = [
        ("facts", [(h, h.fact.edge.fact + (" (closed)" if h.closed else ""),
                    _interval(h.fact.edge.valid_at, h.fact.edge.invalid_at))
                   for h in results.facts]),
        ("entities", [(h, h.entity.name, "") for h in results.entities]),
        ("episodes", [(h, h.episode.content[:120], h.episode.valid_at.strftime("%Y-%m-%d"))
                      for h in results.episodes]),
        ("communities", [(h, h.community.name, "") for h in results.communities]),
    ]  # fmt: skip
    shown = False
    for name, rows in sections:
        if not rows:
            continue
        shown = True
        table = Table(title=name, title_justify="left")
        table.add_column("#", justify="right")
        table.add_column("text")
        table.add_column("valid")
        table.add_column("score", justify="right")
        if explain:
            table.add_column("fused", justify="right")
            table.add_column("branch ranks")
        for i, (hit, text, valid) in enumerate(rows, start=1):
            row = [str(i), text, valid, f"{hit.score:.4f}"]
            if explain:
                row += [f"{hit.fused_score:.4f}",
                        ", ".join(f"{m} #{r}" for m, r in hit.ranks.items())]  # fmt: skip
            table.add_row(*row)
        console.print(table)
    if not shown:
        console.print("no results")


@app.command()
def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="What to look for, in plain words.")],
    recipe: Annotated[
        str, typer.Option(help=f"Search recipe: {', '.join(sorted(RECIPES))}.")
    ] = "facts_hybrid_rrf",
    as_of: Annotated[
        str | None, typer.Option("--as-of", help="Valid time: what was true then (default: now).")
    ] = None,
    known_at: KnownAtOpt = None,
    history: Annotated[bool, typer.Option(help="Include closed facts, marked.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 10,
    center: Annotated[
        str | None, typer.Option(help="Centre entity for node-distance reranking and BFS.")
    ] = None,
    min_score: Annotated[
        float | None, typer.Option(help="Drop results scoring below this (may leave none).")
    ] = None,
    cross_encoder: Annotated[
        str | None,
        typer.Option(help="sentence-transformers CrossEncoder model path, for *_cross_encoder."),
    ] = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Show each branch's hits and the fused scores.")
    ] = False,
    context: Annotated[
        bool, typer.Option("--context", help="Print the prompt-ready context block instead.")
    ] = False,
    max_tokens: Annotated[int, typer.Option(min=50, help="Token budget for --context.")] = 1000,
    as_json: JsonOpt = False,
) -> None:
    """Hybrid search (BM25 + cosine, or + BFS; fused by RRF, reranked), in any time view.

    Cosine needs an embedder (--embedder minilm); without one that branch reports an error
    and the others still run.
    """
    settings: Settings = ctx.obj
    try:
        v, k = _time(as_of, "as-of"), _time(known_at, "known-at")
    except KGError as exc:
        raise _fail(str(exc)) from None
    ce: CrossEncoder | None = None
    if cross_encoder is not None:
        from kg.retrieval import SentenceTransformerCrossEncoder

        try:
            ce = SentenceTransformerCrossEncoder(cross_encoder)
        except (OSError, ValueError) as exc:
            raise _fail(f"cross-encoder {cross_encoder!r}: {exc}") from None

    async def work() -> SearchResults:
        kg = await settings.open(cross_encoder=ce)
        try:
            return await kg.search(
                query, group_id=settings.group, recipe=recipe, valid_at=v, known_at=k,
                include_history=history, limit=limit, center=center, min_score=min_score,
            )  # fmt: skip
        finally:
            await kg.close()

    results = _run(work())
    if as_json:
        out.print_json(results.model_dump_json())
    elif context:
        out.print(render_context(results, max_tokens=max_tokens), markup=False, highlight=False,
                  soft_wrap=True)  # fmt: skip
    else:
        print_search(results, explain=explain)


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
