"""`kg`: the command line. Every error is one line naming the problem, with a non-zero exit.

Commands parse options, call the `KG` facade and hand what it returns to kg.cli.render.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import json
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import typer
from pydantic import BaseModel, ValidationError

from kg.arguments import request_of
from kg.cli import config_file, render
from kg.cli.config_cmd import ConfigOpt, config_app
from kg.cli.demo import run_demo
from kg.cli.serve_options import (
    AllowedHostOpt,
    BodyTimeoutOpt,
    ClientConnectionsOpt,
    GracefulTimeoutOpt,
    HeaderTimeoutOpt,
    HostOpt,
    KeyBurstOpt,
    KeyConcurrencyOpt,
    KeyQueueOpt,
    KeyRateOpt,
    KeySearchConcurrencyOpt,
    KeySearchCostOpt,
    LogFormatOpt,
    LogLevelOpt,
    MaxBodyOpt,
    MetricsFlushOpt,
    MetricsTokenOpt,
    PortOpt,
    check_log_format,
)
from kg.erasure import ErasureReceipt
from kg.errors import (
    InputError,
    KGError,
    LLMRequiredError,
    StoreUnavailableError,
    json_object,
    validation_message,
)
from kg.facade import KG, BulkResult
from kg.ingest.llm import StructuredLLM
from kg.placement import move_group, placement_rows
from kg.retrieval import RECIPES, CrossEncoder, SearchResults
from kg.retrieval.config import DEFAULT_RECIPE_WITHOUT_LLM
from kg.retrieval.request import ContextRequest, SearchRequest
from kg.rollback import RollbackReport
from kg.schemas.embedder import Embedder
from kg.schemas.episode import Episode
from kg.schemas.graph import Fact
from kg.schemas.ontology import DEFAULT_ONTOLOGY, Ontology
from kg.schemas.requests import (
    EraseEntityRequest,
    EraseGroupRequest,
    FactsRequest,
    HistoryRequest,
    LogRequest,
    RollbackRequest,
)
from kg.schemas.validation import check_group_id
from kg.store.falkordb.embedded import Durability
from kg.store.placed import PlacedStore
from kg.times import parse_time

T = TypeVar("T")
R = TypeVar("R", bound=BaseModel)
ONTOLOGY_MAX_BYTES = 10_000_000

if TYPE_CHECKING:  # the serve extra: imported by `kg serve` itself
    from kg.server.app import ServeOptions
    from kg.server.connections import ConnectionLimits

app = typer.Typer(
    name="kg",
    help="Bi-temporal knowledge-graph memory: what was true when, and what we knew when.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's plain help: it wraps every column to the terminal (COLUMNS, else 80 when piped)
    # where rich's tables cut long values ('communities_hybrid_…') and print '<bool>' after
    # flags, so that '--apply false' looked like something to type.
    rich_markup_mode=None,
    context_settings={"max_content_width": 10_000},
)
out = render.SafeConsole()
err = render.SafeConsole(stderr=True)


class DurabilityOpt(StrEnum):
    everysec = "everysec"
    always = "always"


@dataclass
class Settings:
    home: Path | None
    uri: str | None
    group: str
    ontology_path: Path | None
    embedder: str = "auto"
    durability: Durability = "everysec"
    stores: str | None = None
    placement: str | None = None

    def ontology(self) -> Ontology:
        if self.ontology_path is None:
            return DEFAULT_ONTOLOGY
        try:
            with self.ontology_path.open("rb") as fh:
                raw = fh.read(ONTOLOGY_MAX_BYTES + 1)  # bounded: --ontology /dev/zero ends
        except OSError as exc:
            raise InputError(f"ontology {self.ontology_path}: {exc.strerror}") from None
        if len(raw) > ONTOLOGY_MAX_BYTES:
            raise InputError(
                f"ontology {self.ontology_path}: larger than {ONTOLOGY_MAX_BYTES} bytes"
            )
        try:
            return Ontology.model_validate_json(raw)
        except ValidationError as exc:
            raise InputError(f"ontology {self.ontology_path}: {validation_message(exc)}") from None

    def make_embedder(self) -> Embedder | Literal["auto"] | None:
        """'auto' (the group's recorded model, if any), 'none', 'minilm' (the packaged
        all-MiniLM-L6-v2), or a sentence-transformers model path."""
        if self.embedder == "auto":
            return "auto"
        if self.embedder in ("", "none"):
            return None
        from kg.ingest.embeddings import embedder_named

        try:
            return embedder_named(self.embedder)
        except (OSError, RuntimeError, ValueError) as exc:
            raise InputError(f"embedder {self.embedder!r}: {exc}") from None

    async def open(
        self,
        cross_encoder: CrossEncoder | None = None,
        llm: StructuredLLM | None = None,
        *,
        attach: bool = True,
    ) -> KG:
        """The KG the command works on. An embedded store a live kg process holds (`kg
        serve`) is shared through that process's server, with a note on stderr."""
        kg = await KG.open(
            self.uri,
            home=self.home,
            ontology=self.ontology(),
            embedder=self.make_embedder(),
            group_id=self.group,
            cross_encoder=cross_encoder,
            llm=llm,
            durability=self.durability,
            progress=render.loading(err),
            attach=attach,
            stores=self.stores,
            placement=self.placement,
        )
        return _noted(kg)


def _noted(kg: KG) -> KG:
    """A store shared with the kg process that holds it says so, once, on stderr."""
    if (owner := getattr(kg.store, "owner", None)) is not None:
        render.note(err, f"using the store {owner} holds")
    return kg


async def _working(kg: KG, work: Callable[[KG], Awaitable[T]]) -> T:
    """`work`, then the store closed. A shared store's owner that exits takes its server
    along: that is said as such (each write is one atomic query, so nothing is half
    written, and re-running resumes)."""
    try:
        return await work(kg)
    except StoreUnavailableError as exc:
        if (owner := getattr(kg.store, "owner", None)) is None:
            raise
        raise StoreUnavailableError(
            f"{owner}, whose store this command shared, has gone: {exc}; nothing is half "
            "written: run the command again"
        ) from None
    finally:
        await kg.close()


OWNER_POLL_SECONDS = 1.0  # how often a long-running command on a shared store checks its owner


async def _while_owner_lives(kg: KG, main: Awaitable[T]) -> T:
    """`main`, a command that runs until stopped (`kg worker`, `kg mcp`). On a shared store
    it ends when the store's owner exits, its server with it: one line (see `_working`),
    instead of failing every call from then on; started again, it owns the store itself."""
    task = asyncio.ensure_future(main)
    alive = getattr(kg.store, "owner_alive", None)
    while alive is not None and not task.done():
        await asyncio.wait({task}, timeout=OWNER_POLL_SECONDS)
        if not task.done() and not alive():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise StoreUnavailableError("it exited, and its server with it")
    result = await task
    if alive is not None and not alive():  # it ended (e.g. stdin closed) as the owner went
        raise StoreUnavailableError("it exited, and its server with it")
    return result


def _fail(message: str) -> typer.Exit:
    render.error(err, message)
    return typer.Exit(code=1)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        return asyncio.run(coro)
    except KGError as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        raise _fail("interrupted; episodes already ingested are kept, re-run to resume") from None


async def _with_kg(
    settings: Settings,
    work: Callable[[KG], Awaitable[T]],
    *,
    llm: StructuredLLM | None = None,
    cross_encoder: CrossEncoder | None = None,
) -> T:
    return await _working(await settings.open(cross_encoder=cross_encoder, llm=llm), work)


def _time(value: str | None, name: str) -> datetime | None:
    return None if value is None else parse_time(value, field=name)


def _times(**values: str | None) -> list[datetime | None]:
    """Parse time options (named as their flags), or fail naming the bad one."""
    try:
        return [_time(value, name.replace("_", "-")) for name, value in values.items()]
    except KGError as exc:
        raise _fail(str(exc)) from None


def _request(model: type[R], what: str, **fields: Any) -> R:
    """A command's request: the model its `KG` method validates (kg.schemas.requests),
    checked before the store opens; a refusal is the method's own one-line error."""
    try:
        return request_of(model, None, fields, what)
    except KGError as exc:
        raise _fail(str(exc)) from None


def _renamed(old_flag: str, old: T | None, new_flag: str, new: T | None) -> T | None:
    """A flag under its one name, or under the name it had (hidden, for one release), with
    a one-line note on stderr when the old name was used."""
    if old is None or old is False:
        return new
    render.note(err, f"{old_flag} is deprecated; use {new_flag}")
    if new is not None and new is not False and new != old:
        raise _fail(f"{old_flag} is the old name of {new_flag}: give {new_flag} only")
    return old


@app.callback()
def main_options(
    ctx: typer.Context,
    home: Annotated[
        str | None,
        typer.Option(
            envvar="KG_HOME", metavar="PATH", help="Embedded data directory (default: ~/.kg)."
        ),
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
            help="Embeddings for ingest and search: 'auto' (the model the group was embedded "
            "with, if any), 'none', 'minilm' (packaged, offline) or a sentence-transformers "
            "model path.",
        ),
    ] = "auto",
    durability: Annotated[
        DurabilityOpt,
        typer.Option(
            envvar="KG_DURABILITY",
            help="Embedded store: 'everysec' (default; a killed server can lose up to 2 s of "
            "acknowledged writes while an fsync lags) or 'always' (each write fsynced before "
            "it is acknowledged).",
        ),
    ] = DurabilityOpt.everysec,
    stores: Annotated[
        str | None,
        typer.Option(
            envvar="KG_STORES",
            help="Several store servers, named: 'a=embedded:PATH,b=falkordb://h:p,c=bolt://h:p' "
            "(instead of --uri); each group on the one the placement table names.",
        ),
    ] = None,
    # Not named `placement`: click's default_map (kg.toml) keys options and subcommands alike,
    # and `kg placement` is a subcommand.
    directory: Annotated[
        str | None,
        typer.Option(
            "--placement",
            envvar="KG_PLACEMENT",
            help="With --stores: the store holding the placement table (default: the first).",
        ),
    ] = None,
    config: ConfigOpt = None,  # read before the command runs (kg.cli.config_file)
) -> None:
    if home == "":  # Path("") is the current directory: never a data directory by accident
        raise _fail("--home / KG_HOME is empty; unset it for the default ~/.kg")
    ctx.obj = Settings(
        home=None if home is None else Path(home).expanduser(),
        uri=uri,
        group=group,
        ontology_path=None if ontology is None else ontology.expanduser(),
        embedder=embedder,
        durability=durability.value,
        stores=stores,
        placement=directory,
    )


# -- ingest ---------------------------------------------------------------------------------


def read_episodes(path: Path | None, text: str, group: str) -> list[tuple[str, Episode]]:
    """Parse every line (as `file:line` and its episode) before anything is written."""
    name = str(path) if path else "<stdin>"
    episodes: list[tuple[str, Episode]] = []
    # Records end at "\n" only: U+2028, U+2029 and U+0085 are ordinary characters inside JSON
    # strings, and str.splitlines() would cut a record at them.
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        data = json_object(line, where)
        data.setdefault("group_id", group)
        try:
            episodes.append((where, Episode.model_validate(data)))
        except ValidationError as exc:
            raise InputError(f"{where}: {validation_message(exc)}") from None
    if not episodes:
        raise InputError(f"{name}: no episodes found")
    return episodes


def check_episodes(
    kg: KG, episodes: list[tuple[str, Episode]], *, extract: bool, queued: bool = False
) -> None:
    """`KG.check_episode` on every line, its errors named by file and line."""
    for where, episode in episodes:
        try:
            kg.check_episode(episode, extract=extract, queued=queued)
        except LLMRequiredError:
            raise InputError(
                f"{where}: {episode.source.value!r} episodes need an LLM (--llm-model, and "
                "--llm-base-url for a local server) or --no-extract to store them as text"
            ) from None
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None


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


def _llm(
    model: str | None, base_url: str | None, api_key: str | None, concurrency: int = 4
) -> StructuredLLM | None:
    if not model:
        return None
    import openai

    from kg.ingest.llm import OpenAILLM

    try:
        return OpenAILLM(model, base_url=base_url, api_key=api_key, max_concurrency=concurrency)
    except (ValueError, openai.OpenAIError) as exc:  # a bad URL; no API key
        raise _fail(f"--llm-model {model}: {exc}") from None


@app.command()
def ingest(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="JSON Lines of episodes, or '-' for stdin.")],
    llm_model: LlmModelOpt = None,
    llm_base_url: LlmBaseUrlOpt = None,
    llm_api_key: LlmApiKeyOpt = None,
    extract: Annotated[
        bool,
        typer.Option(
            "--extract/--no-extract",
            help="Extract facts from text episodes, or store them unextracted (searchable only).",
        ),
    ] = True,
    concurrency: Annotated[
        int, typer.Option(min=1, max=64, help="Groups ingested in parallel.")
    ] = 4,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait/--no-wait",
            help="Write the episodes before returning, or enqueue and return: stored at "
            "once (searchable), extracted and written by a worker (`kg worker`, `kg serve`).",
        ),
    ] = True,
    background: Annotated[bool, typer.Option("--background", hidden=True)] = False,
    as_json: JsonOpt = False,
) -> None:
    """Ingest episodes from a JSON Lines file (validated in full before any write).

    Each group is ingested by one writer in reference-time order; up to --concurrency groups
    run at once. Re-running skips what is already in (by content hash), so an interrupted
    ingest resumes. A text episode whose extraction fails is recorded as failed and retried
    by the next run. With --no-wait, the episodes are queued in the store and this returns;
    no LLM is needed here (the worker has it).
    """
    settings: Settings = ctx.obj
    if background:  # the flag's name until issue 24: HTTP and MCP call it wait
        render.note(err, "--background is deprecated; use --no-wait")
        wait = False
    if llm_model and not extract:
        raise _fail("give --llm-model or --no-extract, not both")
    if not wait and llm_model:
        raise _fail("--no-wait queues the episodes: give --llm-model to `kg worker`")
    try:
        if file == "-":
            path, text = None, sys.stdin.read().removeprefix("\ufeff")
        else:
            path = Path(file)
            text = path.read_text(encoding="utf-8-sig")  # a leading BOM marks UTF-8
        episodes = read_episodes(path, text, settings.group)
    except OSError as exc:
        raise _fail(f"cannot read {file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise _fail(f"{file}: not UTF-8 text") from None
    except KGError as exc:
        raise _fail(str(exc)) from None

    async def work(kg: KG) -> BulkResult:
        check_episodes(kg, episodes, extract=extract, queued=not wait)
        with render.progress(err, len(episodes)) as advance:
            return await kg.add_episodes(
                [ep for _, ep in episodes],
                concurrency=concurrency,
                extract=extract,
                wait=wait,
                on_progress=advance,
            )

    llm = _llm(llm_model, llm_base_url, llm_api_key, concurrency)
    result = _run(_with_kg(settings, work, llm=llm))
    if as_json:
        out.print_json(result.model_dump_json())
    else:
        render.ingest(out, result)
    if result.failed:
        raise typer.Exit(code=1)


@app.command()
def worker(
    ctx: typer.Context,
    llm_model: LlmModelOpt = None,
    llm_base_url: LlmBaseUrlOpt = None,
    llm_api_key: LlmApiKeyOpt = None,
    concurrency: Annotated[
        int, typer.Option(min=1, max=256, help="Extraction calls in flight.")
    ] = 4,
    all_groups: Annotated[
        bool, typer.Option("--all-groups", help="Every group with queued episodes, not --group.")
    ] = False,
    drain: Annotated[
        bool, typer.Option("--drain", help="Exit once the queue is empty (default: keep polling).")
    ] = False,
    lease_seconds: Annotated[
        float, typer.Option(min=1, help="A dead worker's episodes are taken over after this.")
    ] = 60.0,
    poll_seconds: Annotated[float, typer.Option(min=0.05, help="Seconds between polls.")] = 1.0,
    max_attempts: Annotated[int, typer.Option(min=1, max=100, help="Claims per episode.")] = 5,
    session_timeout: Annotated[
        float | None,
        typer.Option(help="Hold a session's episodes until it has been idle this long."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Extract and write queued episodes (`kg ingest --no-wait`, `add_episode(wait=False)`).

    Many workers may run against one server: each group is worked on by one worker at a
    time, in reference-time order, and a dead worker's episodes are taken over after
    --lease-seconds. Extraction calls run --concurrency at a time; writes stay in order.
    Ctrl-C stops claiming and hands back what was claimed and not written.
    """
    from kg.queue import Worker

    settings: Settings = ctx.obj
    llm = _llm(llm_model, llm_base_url, llm_api_key, concurrency)

    async def work(kg: KG) -> Any:
        w = Worker(
            kg,
            groups=None if all_groups else [settings.group],
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            poll_seconds=poll_seconds,
            max_attempts=max_attempts,
            session_timeout=session_timeout,
        )
        if drain:
            return await _while_owner_lives(kg, w.drain())
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError):
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, lambda: asyncio.ensure_future(w.stop()))
        return await _while_owner_lives(kg, w.run())

    stats = _run(_with_kg(settings, work, llm=llm))
    if as_json:
        out.print_json(stats.model_dump_json())
    else:
        render.worker(out, stats)


@app.command()
def doctor(
    llm: Annotated[
        str,
        typer.Option(
            "--llm",
            envvar="KG_LLM_BASE_URL",
            help="The OpenAI-compatible endpoint to test (e.g. http://127.0.0.1:8080/v1).",
        ),
    ],
    llm_model: Annotated[
        str | None,
        typer.Option(
            envvar="KG_LLM_MODEL", help="Model name (default: the first the server lists)."
        ),
    ] = None,
    llm_api_key: LlmApiKeyOpt = None,
    turns: Annotated[int, typer.Option(min=1, max=5, help="Test turns to send.")] = 5,
    max_tokens: Annotated[int, typer.Option(min=16, help="Reply cap a call.")] = 384,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds a call may take.")] = 300.0,
    profile: Annotated[
        str | None, typer.Option(help="Prompt profile: default or small (default: by model name).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Test an LLM endpoint for extraction: valid replies, facts kept, seconds a call.

    Sends a few made-up conversation turns through kg's own extraction and vetting (the
    model's prompt profile, the reply format the server accepts) and says whether the output
    is usable. Writes nothing. Exits 1 when it is not usable.
    """
    import openai

    from kg.ingest.doctor import diagnose
    from kg.ingest.llm import LLMError, OpenAILLM, served_models

    async def work() -> Any:
        model = llm_model
        if model is None:
            names = await served_models(llm, llm_api_key)
            if not names:
                raise LLMError(f"{llm}: the server lists no model; give --llm-model")
            model = names[0]
        client = OpenAILLM(
            model,
            base_url=llm,
            api_key=llm_api_key,
            max_concurrency=1,
            max_retries=1,
            timeout=timeout,
            max_tokens=max_tokens,
            prompt_profile=profile,
        )
        with render.progress(err, turns, "testing") as advance:
            return await diagnose(client, turns=turns, on_turn=lambda i: advance(i + 1, turns))

    try:
        report = asyncio.run(work())
    except (ValueError, LLMError, openai.OpenAIError) as exc:
        raise _fail(f"doctor {llm}: {exc}") from None
    render.doctor(out, report, as_json=as_json)
    if not report.usable:
        raise typer.Exit(code=1)


# -- reads ----------------------------------------------------------------------------------


SubjectOpt = Annotated[str | None, typer.Option(help="Subject entity name.")]
PredicateOpt = Annotated[str | None, typer.Option(help="Predicate, e.g. LIVES_IN.")]
ObjectOpt = Annotated[str | None, typer.Option("--object", help="Object entity name.")]
TIMES = "2024-03-15, 2024-03-15T09:00Z, 2024-03, 2024, or words: 'last year', 'March 2021'"
KnownAtOpt = Annotated[
    str | None,
    typer.Option(help=f"Transaction time: as kg knew it then (default: now). {TIMES}."),
]
ValidAtOpt = Annotated[
    str | None,
    typer.Option("--valid-at", help=f"Valid time: what was true then (default: now). {TIMES}."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
AbstainOpt = Annotated[
    float | None,
    typer.Option(
        help="Return nothing when the best cosine similarity is below this: a question about "
        "something never said. It depends on what is indexed (MiniLM: 0.44 on unextracted "
        "turns, 0.59 on kg eval's sets; 0.49 refuses 10% of answerable questions on turns: "
        "calibrate, docs/retrieval.md). Default: off."
    ),
]
AbstainJointOpt = Annotated[
    float | None,
    typer.Option(
        help="Return nothing when no hit is found by both meaning and words: the best "
        "mean of a hit's cosine similarity and its share of the query's top BM25 score "
        "is below this (MiniLM: 0.27 on unextracted turns, 0.35 on kg eval's sets; it depends "
        "on what is indexed: calibrate, docs/retrieval.md). FalkorDB. Default: off."
    ),
]


def _facts_command(
    settings: Settings,
    subject: str | None,
    predicate: str | None,
    obj: str | None,
    valid_at: str | None,
    known_at: str | None,
    contested: bool,
    as_json: bool,
    valid_name: str = "valid_at",
) -> None:
    v, k = _times(**{valid_name: valid_at, "known_at": known_at})
    request = _request(
        FactsRequest,
        "facts query",
        subject=subject,
        predicate=predicate,
        object=obj,
        valid_at=v,
        known_at=k,
        include_contested=contested,
    )

    async def work(kg: KG) -> list[Fact]:
        return await kg.facts(request, group_id=settings.group)

    found = _run(_with_kg(settings, work))
    title = f"true at {valid_at or 'now'}, as known at {known_at or 'now'}"
    render.facts(out, found, as_json=as_json, title=title)


@app.command()
def facts(
    ctx: typer.Context,
    subject: SubjectOpt = None,
    predicate: PredicateOpt = None,
    object_: ObjectOpt = None,
    valid_at: ValidAtOpt = None,
    known_at: KnownAtOpt = None,
    include_contested: Annotated[
        bool, typer.Option("--include-contested", help="Include contested facts.")
    ] = False,
    contested: Annotated[bool, typer.Option("--contested", hidden=True)] = False,
    as_json: JsonOpt = False,
) -> None:
    """Facts true now (or at --valid-at), as known now (or at --known-at)."""
    contested = bool(_renamed("--contested", contested, "--include-contested", include_contested))
    _facts_command(ctx.obj, subject, predicate, object_, valid_at, known_at, contested, as_json)


@app.command("as-of")
def as_of(
    ctx: typer.Context,
    when: Annotated[
        str,
        typer.Argument(
            help="Valid time: 2024-03-15, 2024-03-15T09:00Z, 2024-03, 2024, or words such as "
            "'last year', 'March 2021', 'yesterday'."
        ),
    ],
    subject: SubjectOpt = None,
    predicate: PredicateOpt = None,
    object_: ObjectOpt = None,
    known_at: KnownAtOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What was true at WHEN ("what was true in March"), as known now or at --known-at."""
    _facts_command(
        ctx.obj, subject, predicate, object_, when, known_at, False, as_json, valid_name="WHEN"
    )


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
    request = _request(
        HistoryRequest,
        "history query",
        subject=subject,
        predicate=predicate,
        object=object_,
        limit=limit,
    )

    async def work(kg: KG) -> list[Fact]:
        return await kg.history(request, group_id=settings.group)

    found = _run(_with_kg(settings, work))
    render.facts(out, found, as_json=as_json, title="history", transaction=True)


@app.command()
def stats(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Counts for the group, what ingest did and cost, and what queries returned.

    Ingest: LLM calls and tokens, facts added / reinforced / closed / merged, facts and
    passages quarantined by the instruction guard (listed by `kg quarantine`), the share of
    LLM episodes that kept no fact. Queries: searches, hits per branch, latency, tokens
    injected by context renders (counted by every process that searched, saved on close).
    API: calls made with the group's keys through `kg serve` per route and per MCP tool (`kg
    mcp` too), with errors and mean latency (saved every 30 s and when the server stops).
    """
    settings: Settings = ctx.obj

    async def work(kg: KG) -> tuple[Any, Any]:
        return await kg.stats(settings.group), await kg.metrics(settings.group)

    s, m = _run(_with_kg(settings, work))
    render.stats(out, s, m, as_json=as_json)


@app.command()
def groups(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List the store's groups (every group has episodes), one a line."""
    settings: Settings = ctx.obj
    found = _run(_with_kg(settings, lambda kg: kg.groups()))
    if as_json:
        out.print_json(json.dumps(found))
    else:
        for g in found:
            out.print(g, highlight=False, markup=False)


@app.command("adopt-graphiti")
def adopt_graphiti(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Adopt a group written by graphiti-core (same FalkorDB or Neo4j) for as-of views,
    `why` and rollback. Idempotent; see docs/graphiti.md for what it cannot restore."""
    settings: Settings = ctx.obj
    r = _run(_with_kg(settings, lambda kg: kg.adopt_graphiti(settings.group)))
    if as_json:
        out.print_json(r.model_dump_json())
    else:
        render.adoption(out, r)


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
            sink.write(render.escape_json(line, ascii_only=ascii_only) + "\n")
            n += 1
        return n

    try:
        sink = tmp.open("w", encoding="utf-8") if tmp else sys.stdout
        ascii_only = not render.writes_unicode(sink)
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
    as_json: JsonOpt = False,
) -> None:
    """Import a `kg export` file into a new group of this store (e.g. --uri bolt://...).

    Refuses a group that already exists; a malformed or truncated file leaves nothing behind.
    """
    settings: Settings = ctx.obj

    try:
        fh = sys.stdin if file == "-" else open(file, encoding="utf-8-sig")  # noqa: SIM115
        with fh:
            source = "<stdin>" if file == "-" else file
            r = _run(_with_kg(settings, lambda kg: kg.import_lines(fh, into=into, source=source)))
    except OSError as exc:
        raise _fail(f"cannot read {file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise _fail(f"{file}: not UTF-8 text") from None
    if as_json:
        out.print_json(r.model_dump_json())
    else:
        render.imported(out, r)


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

    async def work(kg: KG) -> Any:
        return await kg.build_communities(settings.group, max_iterations=max_iterations)

    r = _run(_with_kg(settings, work, llm=llm))
    if as_json:
        out.print_json(r.model_dump_json())
    else:
        render.community_build(out, r)


@communities_app.command("list")
def communities_list(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every community of the group: name, size, summary."""
    settings: Settings = ctx.obj
    found = _run(_with_kg(settings, lambda kg: kg.communities(settings.group)))
    render.community_list(out, settings.group, found, as_json=as_json)


@app.command()
def quarantine(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """What the instruction guard held back from tools, documents and agents: facts never
    written and passages `context()` withholds, each with the rule it tripped and its episode.
    Also counted by `kg stats` (facts / passages quarantined)."""
    settings: Settings = ctx.obj
    held = _run(_with_kg(settings, lambda kg: kg.quarantine(settings.group)))
    render.quarantine(out, settings.group, held, as_json=as_json)


# -- provenance: rollback, why, log, erase ---------------------------------------------------


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
    apply: Annotated[
        bool, typer.Option("--apply/--dry-run", help="Carry out the plan, or only show it.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Undo episodes as if never ingested: shows the plan; --apply carries it out atomically.

    Episode ids are whole or any unique prefix of 6 or more characters (tables show 8).

    Facts only they supported are deleted, facts they closed are re-opened (unless another
    episode also closed them), and reinforcements lose them. The episodes stay, marked rolled
    back, so re-sending them is still a no-op.
    """
    settings: Settings = ctx.obj
    if bool(episode_ids) == (source_description is not None):
        raise _fail("give episode ids or --source-description, not both and not neither")
    if since is not None and source_description is None:
        raise _fail("--since goes with --source-description")
    [since_at] = _times(since=since)
    request = _request(
        RollbackRequest,
        "rollback",
        episode_ids=episode_ids or None,
        source_description=source_description,
        since=since_at,
        dry_run=not apply,
    )

    async def work(kg: KG) -> RollbackReport:
        return await kg.rollback(request, group_id=settings.group)

    report = _run(_with_kg(settings, work))
    if as_json:
        out.print_json(report.model_dump_json())
    else:
        render.rollback(out, report)


@app.command()
def replay(
    ctx: typer.Context,
    apply: Annotated[
        bool,
        typer.Option("--apply/--dry-run", help="Replace the live timelines, or only compare."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Rebuild the group from its episode log with the current ontology; print the differences.

    --apply swaps in the rebuilt timelines atomically (e.g. after changing a cardinality).
    """
    settings: Settings = ctx.obj
    report = _run(
        _with_kg(settings, lambda kg: kg.replay(group_id=settings.group, dry_run=not apply))
    )
    if as_json:
        out.print_json(report.model_dump_json())
    else:
        render.replay(out, report)


@app.command()
def why(
    ctx: typer.Context,
    fact_id: Annotated[
        str,
        typer.Argument(help="Fact or version id: whole, or a unique prefix of 6+ characters."),
    ],
    as_json: JsonOpt = False,
) -> None:
    """A fact's versions and the episodes that created, reinforced and closed it."""
    settings: Settings = ctx.obj
    explanation = _run(_with_kg(settings, lambda kg: kg.why(fact_id, group_id=settings.group)))
    render.why(out, fact_id, explanation.versions, explanation.episodes, as_json=as_json)


@app.command("log")
def log_(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 100,
    closures: Annotated[bool, typer.Option(help="Include closures of facts.")] = True,
    as_json: JsonOpt = False,
) -> None:
    """The audit trail, newest first: rollbacks, erasures, and every closure of a fact."""
    settings: Settings = ctx.obj

    request = _request(LogRequest, "log query", limit=limit, closures=closures)

    async def work(kg: KG) -> Any:
        return await kg.log(request, group_id=settings.group)

    render.log(out, _run(_with_kg(settings, work)), as_json=as_json)


@app.command()
def erase(
    ctx: typer.Context,
    subject: Annotated[
        str | None, typer.Option("--subject", help="Erase this subject from the group.")
    ] = None,
    entity: Annotated[str | None, typer.Option("--entity", hidden=True)] = None,
    whole_group: Annotated[
        bool, typer.Option("--whole-group", help="Erase the entire group (--group).")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Erase nothing: list what would go, including facts "
            "about other subjects that came from the same episodes.",
        ),
    ] = False,
    keep_others: Annotated[
        bool,
        typer.Option(
            "--keep-others",
            help="Keep those facts, re-asserted from a redacted "
            "copy of each episode (the subject's name cut out).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Physically delete a subject or a whole group, with its traces on disk. Not undoable."""
    settings: Settings = ctx.obj
    entity = _renamed("--entity", entity, "--subject", subject)
    if (entity is None) == (not whole_group):
        raise _fail("give --subject NAME or --whole-group, not both and not neither")
    if (dry_run or keep_others) and entity is None:
        raise _fail("--dry-run and --keep-others apply to --subject")
    target = f"entity {entity!r}" if entity else f"the whole group {settings.group!r}"
    question = f"Permanently erase {target} from group {settings.group!r}?"
    try:
        confirmed = dry_run or yes or typer.confirm(question)
    except typer.Abort:  # no answer: end of input, or interrupted
        confirmed = False
    if not confirmed:
        raise _fail("not confirmed; nothing erased")

    request: EraseEntityRequest | EraseGroupRequest = (
        _request(
            EraseEntityRequest,
            "erasure",
            subject=entity,
            dry_run=dry_run,
            keep_others=keep_others,
        )
        if entity is not None
        else _request(EraseGroupRequest, "erasure", confirm=settings.group)
    )

    async def work(kg: KG) -> ErasureReceipt:
        if isinstance(request, EraseEntityRequest):
            return await kg.erase_entity(request, group_id=settings.group)
        return await kg.erase_group(request)

    receipt = _run(_with_kg(settings, work))
    if as_json:
        out.print_json(receipt.model_dump_json())
    else:
        render.erasure(out, target, receipt)


# -- search ---------------------------------------------------------------------------------


RecipeOpt = Annotated[
    str | None,
    typer.Option(
        help=f"Search recipe (listed below). Default: {DEFAULT_RECIPE_WITHOUT_LLM} (facts, and "
        "the episodes' text, so that text stored unextracted is found)."
    ),
]
IncludeClosedOpt = Annotated[
    bool, typer.Option("--include-closed", help="Include closed facts (no longer true), marked.")
]
CrossEncoderOpt = Annotated[
    str | None,
    typer.Option(help="sentence-transformers CrossEncoder model path, for *_cross_encoder."),
]
ExplainOpt = Annotated[
    bool,
    typer.Option(
        "--explain",
        help="Show each branch's hits, the fused scores, trust and recency factors, "
        "how time words were read, and why each abstention cutoff refused or answered.",
    ),
]
AskedAtOpt = Annotated[
    str | None,
    typer.Option(
        "--asked-at",
        help="When the question is asked: time words in the query ('last March', "
        "'in 2022', '작년') are read against it (default: --valid-at, else now).",
    ),
]


# One name a line, never wrapped: a recipe name cut at a narrow terminal's edge is no name.
RECIPE_LIST = "\b\nRecipes:\n" + "\n".join(f"  {name}" for name in sorted(RECIPES))


@app.command(epilog=RECIPE_LIST)
def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="What to look for, in plain words.")],
    recipe: RecipeOpt = None,
    valid_at: ValidAtOpt = None,
    as_of: Annotated[str | None, typer.Option("--as-of", hidden=True)] = None,
    known_at: KnownAtOpt = None,
    include_closed: IncludeClosedOpt = False,
    history: Annotated[bool, typer.Option("--history", hidden=True)] = False,
    include_contested: Annotated[
        bool, typer.Option("--include-contested", help="Include contested facts, marked.")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 10,
    center: Annotated[
        str | None, typer.Option(help="Centre entity for node-distance reranking and BFS.")
    ] = None,
    min_score: Annotated[
        float | None, typer.Option(help="Drop results scoring below this (may leave none).")
    ] = None,
    abstain_below: AbstainOpt = None,
    abstain_joint_below: AbstainJointOpt = None,
    cross_encoder: CrossEncoderOpt = None,
    explain: ExplainOpt = False,
    context: Annotated[
        bool, typer.Option("--context", help="Print the prompt-ready context block instead.")
    ] = False,
    max_tokens: Annotated[int, typer.Option(min=50, help="Token budget for --context.")] = 1000,
    asked_at: AskedAtOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Hybrid search (BM25 + cosine, or + BFS; fused, reranked), in any time view.

    Cosine needs embeddings: by default (--embedder auto) the model the group was embedded
    with, if it was (--embedder minilm at ingest); without one that branch reports an error
    and the others still run. Time words in the query become a window (facts valid in it,
    episodes in it boosted); --explain shows how they were read.
    """
    settings: Settings = ctx.obj
    v, k, asked = _times(
        valid_at=_renamed("--as-of", as_of, "--valid-at", valid_at),
        known_at=known_at,
        asked_at=asked_at,
    )
    closed = bool(_renamed("--history", history, "--include-closed", include_closed))
    fields = {
        "query": query,
        "recipe": recipe,
        "valid_at": v,
        "known_at": k,
        "include_closed": closed,
        "include_contested": include_contested,
        "limit": limit,
        "center": center,
        "min_score": min_score,
        "abstain_below": abstain_below,
        "abstain_joint_below": abstain_joint_below,
        "asked_at": asked,
    }
    # The one request model KG.search, HTTP and MCP validate; with --context, its budget too.
    request = (
        _request(ContextRequest, "context", **fields, max_tokens=max_tokens)
        if context and not as_json
        else _request(SearchRequest, "search", **fields)
    )
    _search(
        settings,
        request,
        _cross_encoder(cross_encoder),
        explain=explain,
        as_json=as_json,
    )


def _cross_encoder(path: str | None) -> CrossEncoder | None:
    if path is None:
        return None
    from kg.retrieval import SentenceTransformerCrossEncoder

    try:
        return SentenceTransformerCrossEncoder(path)
    except (OSError, ValueError) as exc:
        raise _fail(f"cross-encoder {path!r}: {exc}") from None


def _search(
    settings: Settings,
    request: SearchRequest,
    ce: CrossEncoder | None,
    *,
    explain: bool,
    as_json: bool,
) -> None:
    """Run a search, or with a `ContextRequest` (--context) its prompt block; print it."""

    async def work(kg: KG) -> SearchResults | str:
        if isinstance(request, ContextRequest):
            return await kg.context(request, group_id=settings.group)
        return await kg.search(request, group_id=settings.group)

    results = _run(_with_kg(settings, work, cross_encoder=ce))
    if isinstance(results, str):
        render.context(out, results)
    elif as_json:
        render.search_json(out, results)
    else:
        render.search(out, results, explain=explain)


# -- server: kg serve, kg mcp, kg keys ------------------------------------------------------

MCP_STOP_SECONDS = 30.0  # kg mcp's background worker, at exit (as kg serve's default)
SERVE_HINT = r"the server needs the serve extra: pip install 'kg\[serve]'"  # \[: rich markup
SERVE_PACKAGES = ("fastapi", "uvicorn", "mcp", "prometheus_client", "starlette")


def _serve_missing(exc: ImportError) -> typer.Exit:
    """The serve extra is missing: say so; any other import error is a bug, raised as is."""
    if (exc.name or "").split(".")[0] in SERVE_PACKAGES:
        return _fail(SERVE_HINT)
    raise exc


RoleOpt = Annotated[
    str,
    typer.Option(
        help="read (search, facts), write (+ add), admin (+ rollback apply, erase, export)."
    ),
]


ChannelOpt = Annotated[
    str,
    typer.Option(
        help="The channel its writes are stored on, and the highest trust they may claim: "
        "agent (lowest; an agent's own notes), document, tool, user (what the user states).",
    ),
]


def _group(settings: Settings, group: str | None) -> str:
    return group if group is not None else settings.group


@app.command()
def serve(
    ctx: typer.Context,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8321,
    llm_model: LlmModelOpt = None,
    llm_base_url: LlmBaseUrlOpt = None,
    llm_api_key: LlmApiKeyOpt = None,
    max_body: MaxBodyOpt = 1 << 20,
    metrics_token: MetricsTokenOpt = None,
    graceful_timeout: GracefulTimeoutOpt = 30,
    metrics_flush: MetricsFlushOpt = 30.0,
    log_level: LogLevelOpt = "info",
    log_format: LogFormatOpt = "text",
    allowed_host: AllowedHostOpt = None,
    key_concurrency: KeyConcurrencyOpt = 4,
    key_search_concurrency: KeySearchConcurrencyOpt = 1,
    key_queue: KeyQueueOpt = 32,
    key_rate: KeyRateOpt = 20.0,
    key_burst: KeyBurstOpt = 40,
    key_search_cost: KeySearchCostOpt = 5.0,
    header_timeout: HeaderTimeoutOpt = 10.0,
    body_timeout: BodyTimeoutOpt = 30.0,
    client_connections: ClientConnectionsOpt = 64,
) -> None:
    """Serve the HTTP API (/v1, described at /openapi.json) and MCP (/mcp) over one store.

    Every request carries an API key (`kg keys create`): the key decides the group, the
    role and the channel. Each key's requests are limited (--key-concurrency, --key-queue,
    --key-rate: 429 beyond); requests whose Host is not the server's are refused, and so
    are cross-site writes. SIGTERM or Ctrl-C stops accepting requests, finishes the writes in
    flight, then closes the store; open requests and the background worker (episodes sent
    with wait=false) get --graceful-timeout, after which an extraction still running is
    handed back to the queue.
    """
    settings: Settings = ctx.obj
    try:
        from kg.server.app import ServeOptions
        from kg.server.connections import ConnectionLimits
        from kg.server.hosts import allowed_hosts
        from kg.server.limits import KeyLimits
        from kg.server.logs import log_config
    except ImportError as exc:
        raise _serve_missing(exc) from None
    hosts = tuple(h.strip() for entry in allowed_host or [] for h in entry.split(",") if h.strip())
    try:
        allowed_hosts(host, hosts)
    except InputError as exc:
        raise _fail(str(exc)) from None
    if metrics_token is not None and len(metrics_token) < 16:
        raise _fail(
            "--metrics-token: use at least 16 characters (e.g. from `openssl rand -hex 16`)"
        )
    if log_level.lower() not in ("debug", "info", "warning", "error"):
        raise _fail(f"--log-level: {log_level!r} is not one of debug, info, warning, error")
    if bad_format := check_log_format(log_format):
        raise _fail(bad_format)
    llm = _llm(llm_model, llm_base_url, llm_api_key)
    options = ServeOptions(
        max_body=max_body,
        body_seconds=body_timeout,
        metrics_token=metrics_token or None,
        host=host,
        allowed_hosts=hosts,
        key_limits=KeyLimits(
            concurrency=key_concurrency,
            search_concurrency=key_search_concurrency,
            queue=key_queue,
            rate=key_rate,
            burst=key_burst,
            search_cost=key_search_cost,
        ),
        flush_seconds=metrics_flush,
        graceful_seconds=graceful_timeout,
    )

    secrets = [t for t in (metrics_token, llm_api_key) if t]
    logs = log_config(log_level, secrets, "json" if log_format == "json" else "text")
    limits = ConnectionLimits(header_timeout, client_connections)
    _run(_serve(settings, llm, options, port=port, log_level=log_level, logs=logs, limits=limits))


async def _serve(
    settings: Settings,
    llm: StructuredLLM | None,
    options: ServeOptions,
    *,
    port: int,
    log_level: str,
    logs: dict[str, Any],
    limits: ConnectionLimits,
) -> None:
    """`kg serve` once its options are checked: the store opened (before uvicorn, so a locked
    store is a one-line error), then uvicorn until a signal, then the store closed."""
    import uvicorn

    from kg.server.app import begin_shutdown, create_app
    from kg.server.connections import guarded_protocol

    # The owner of its store: a server attached to another process's store would lose it
    # when that process exits.
    kg = await settings.open(llm=llm, attach=False)

    async def opened() -> KG:
        return kg

    asgi = create_app(opened, options)

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            begin_shutdown(asgi)  # the worker's stop runs in the requests' timeout
            await super().shutdown(sockets)

    config = uvicorn.Config(
        asgi,
        host=options.host,
        port=port,
        log_level=log_level.lower(),
        log_config=logs,  # every logger at this level, keys and the operator's secrets masked
        timeout_graceful_shutdown=int(options.graceful_seconds),
        lifespan="on",
        server_header=False,
        access_log=False,  # kg.server.access logs each request without what it asked
        # uvicorn's h11 protocol, with a deadline for headers and a cap per client.
        http=guarded_protocol(limits),
    )
    err.print(
        f"kg serve: http://{options.host}:{port} (API /v1, MCP /mcp, store {kg.store.backend})",
        highlight=False,
    )
    # uvicorn turns SIGTERM / SIGINT into a graceful shutdown, then re-raises the signal:
    # with these no-op handlers that ends in a clean exit (code 0), not a kill.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    try:
        await Server(config).serve()
    finally:
        await kg.close()  # a no-op when the lifespan closed it


@app.command("mcp")
def mcp_stdio(
    ctx: typer.Context,
    group: Annotated[
        str | None, typer.Option(help="The one group the tools work in (default: --group).")
    ] = None,
    role: RoleOpt = "write",
    channel: ChannelOpt = "agent",
    llm_model: LlmModelOpt = None,
    llm_base_url: LlmBaseUrlOpt = None,
    llm_api_key: LlmApiKeyOpt = None,
) -> None:
    """MCP over stdio, for desktop clients: the tools work in one group, bound here (no key).

    The default role, write, lets the model add and search; --role admin also lets it
    forget subjects and apply rollbacks. What the model adds is stored on --channel (default
    agent: it never closes what the user stated). Episodes added with wait=false are written
    by a worker in this process; at exit it gets 30 s, then what is unwritten stays queued.
    On a data directory `kg serve` holds, the tools share that server's store.
    """
    settings: Settings = ctx.obj
    try:
        from kg.queue import Worker
        from kg.schemas.episode import Channel
        from kg.schemas.keys import Role
        from kg.server.keys import Principal
        from kg.server.mcp import build_mcp
        from kg.server.service import Memory
    except ImportError as exc:
        raise _serve_missing(exc) from None
    gid = _group(settings, group)
    try:
        principal = Principal(
            key_id="stdio", group_id=check_group_id(gid), role=Role(role), channel=Channel(channel)
        )
    except ValueError as exc:
        raise _fail(str(exc)) from None
    llm = _llm(llm_model, llm_base_url, llm_api_key)

    async def work(kg: KG) -> None:
        memory = Memory(kg)
        # add_memory with wait=false queues; this worker writes the group's queue. On a
        # store shared with `kg serve`, that server's worker polls the queue too: a group's
        # lease lets one worker at a time claim it (kg.queue), so they never both write.
        worker = Worker(kg, groups=[gid])
        running = asyncio.create_task(worker.run())
        try:
            stdio = build_mcp(lambda: memory, fixed=principal).run_stdio_async()
            await _while_owner_lives(kg, stdio)
            await memory.writes.drain()
        finally:
            await worker.stop_within(running, MCP_STOP_SECONDS)

    _run(_with_kg(replace(settings, group=gid), work, llm=llm))


keys_app = typer.Typer(
    help="API keys for `kg serve`: each binds one group, a role and a channel; stored hashed. "
    "Usable while a server runs on the same store, as every command is.",
    no_args_is_help=True,
)
app.add_typer(keys_app, name="keys")


async def _with_store(settings: Settings, work: Callable[[KG], Awaitable[T]]) -> T:
    """The store, for key commands (no embedder or ontology needed). An embedded data
    directory held by a running process (`kg serve`) is reached through that process's own
    store socket (private to this user): servers read keys at every request, so a key made
    or revoked here counts at once."""
    kg = await KG.open(
        settings.uri,
        home=settings.home,
        attach=True,
        stores=settings.stores,
        placement=settings.placement,
    )
    return await _working(_noted(kg), work)


@keys_app.command("create")
def keys_create(
    ctx: typer.Context,
    role: RoleOpt,
    group: Annotated[str | None, typer.Option(help="The key's group (default: --group).")] = None,
    name: Annotated[str, typer.Option(help="A label, e.g. who holds the key.")] = "",
    channel: ChannelOpt = "agent",
    as_json: JsonOpt = False,
) -> None:
    """Create a key for one group and role. The key is printed once: store it now.

    Its writes are stored on --channel and never claim more trust than it (default agent:
    for an agent's memory tool; --channel user for an app relaying what its user states)."""
    settings: Settings = ctx.obj
    from kg.server.keys import create_key

    gid = _group(settings, group)
    record, key = _run(
        _with_store(settings, lambda kg: create_key(kg.store, gid, role, name, channel))
    )
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "key": key,
                    "key_id": record.key_id,
                    "group_id": gid,
                    "role": record.role.value,
                    "channel": record.channel.value,
                }
            )
        )
        return
    err.print(
        f"created key {record.key_id} for group {gid!r}, role {record.role.value}, channel "
        f"{record.channel.value} (shown once; kg stores only its hash):",
        highlight=False,
    )
    out.print(key, highlight=False, soft_wrap=True)


@keys_app.command("list")
def keys_list(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every key: id, group, role, channel, name, created, revoked. Never the keys themselves."""
    settings: Settings = ctx.obj
    render.keys(out, _run(_with_store(settings, lambda kg: kg.store.keys())), as_json=as_json)


@keys_app.command("revoke")
def keys_revoke(
    ctx: typer.Context,
    key_id: Annotated[str, typer.Argument(help="The key id (kg keys list).")],
    as_json: JsonOpt = False,
) -> None:
    """Revoke a key: every server on this store refuses it from its next request."""
    settings: Settings = ctx.obj
    from kg.server.keys import revoke_key

    record = _run(_with_store(settings, lambda kg: revoke_key(kg.store, key_id)))
    if as_json:
        out.print_json(record.model_dump_json(exclude={"key_hash"}))
        return
    out.print(
        f"revoked key {record.key_id} (group {record.scope!r}, role {record.role.value})",
        highlight=False,
    )


placement_app = typer.Typer(
    help="Groups on several store servers (--stores / KG_STORES): where each is, and moving "
    "one to another server.",
    no_args_is_help=True,
)
app.add_typer(placement_app, name="placement")


def _placed(kg: KG) -> PlacedStore:
    if not isinstance(kg.store, PlacedStore):
        raise InputError("kg placement needs several stores: set --stores / KG_STORES")
    return kg.store


@placement_app.command("show")
def placement_show(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every group and the store it is placed on (and whether a move is under way)."""
    settings: Settings = ctx.obj
    rows = _run(_with_store(settings, lambda kg: placement_rows(_placed(kg))))
    render.placements(out, rows, as_json=as_json)


@placement_app.command("move")
def placement_move(
    ctx: typer.Context,
    group: Annotated[str, typer.Argument(help="The group to move.")],
    to: Annotated[str, typer.Option("--to", help="The store (a name in --stores) to move to.")],
    restart: Annotated[
        bool,
        typer.Option(
            help="Undo an interrupted move of the group first (only if its process is gone)."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Move a group to another store server: hold it, export, import, check every record,
    switch its placement, drop it from the source. Writers wait out the move and resume on
    the new server; a step that fails before the switch leaves everything where it was."""
    settings: Settings = ctx.obj
    report = _run(
        _with_store(settings, lambda kg: move_group(_placed(kg), group, to, restart=restart))
    )
    if as_json:
        out.print_json(report.model_dump_json())
        return
    facts = report.counts.get("edges", 0)
    out.print(
        f"moved group {report.group_id!r} from {report.source} to {report.target} "
        f"({facts} fact versions, {sum(report.counts.values())} records)",
        highlight=False,
    )


@app.command(name="eval")
def eval_(
    file: Annotated[Path, typer.Argument(help="Golden set, JSON Lines (docs/eval.md).")],
    mode: Annotated[
        str, typer.Option(help="Ingest: structured (turns + their facts), raw (turns), llm.")
    ] = "structured",
    system: Annotated[
        list[str] | None,
        typer.Option(help="kg, add_only, full_context (LLM); repeat. Default: all that apply."),
    ] = None,
    k: Annotated[int, typer.Option(min=1, max=100, help="Facts and turns retrieved.")] = 10,
    max_tokens: Annotated[int, typer.Option(min=50, help="Context block budget.")] = 1000,
    abstain_below: AbstainOpt = None,
    abstain_joint_below: AbstainJointOpt = None,
    embedder: Annotated[
        str, typer.Option(help="'minilm' (packaged), a model path, or 'none' (BM25 only).")
    ] = "minilm",
    llm_model: Annotated[
        str | None,
        typer.Option(
            envvar="KG_LLM_MODEL",
            help="Model that answers and judges (and extracts, with --mode llm); without one, "
            "retrieval metrics only.",
        ),
    ] = None,
    llm_base_url: LlmBaseUrlOpt = None,
    llm_api_key: LlmApiKeyOpt = None,
    time_words: Annotated[
        bool, typer.Option(help="Read time words in questions as windows (--no-time-words: off).")
    ] = True,
    items_out: Annotated[
        Path | None, typer.Option(help="Write each item's result here (JSON Lines).")
    ] = None,
    wide: Annotated[
        bool,
        typer.Option(
            "--wide",
            help="One line a row with every column (latency too) and exact intervals; "
            "the default fits 80 columns.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Evaluate retrieval on a golden set, in a throwaway store: evidence recall@k,
    stale-in-context rate, abstention, tokens and latency per item type, with Wilson 95%
    intervals; beside kg, an ADD-only store that never supersedes. With --llm-model it also
    answers, judges, and runs a full-context baseline."""
    from kg.eval import Mode, System, load, run_eval

    try:
        modes, systems = Mode(mode), [System(s) for s in system] if system else None
    except ValueError as exc:
        raise _fail(str(exc)) from None
    golden = load(file) if file.exists() else None
    if golden is None:
        raise _fail(f"golden set {file}: no such file")
    settings = Settings(home=None, uri=None, group="default", ontology_path=None, embedder=embedder)
    emb = settings.make_embedder()
    llm = _llm(llm_model, llm_base_url, llm_api_key)
    with err.status("evaluating") as status:
        report = _run(
            run_eval(
                golden,
                mode=modes,
                systems=systems,
                k=k,
                max_tokens=max_tokens,
                abstain_below=abstain_below,
                abstain_joint_below=abstain_joint_below,
                embedder=emb if emb != "auto" else None,
                llm=llm,
                progress=lambda msg: status.update(msg),
                read_time=time_words,
            )
        )
    if items_out is not None:
        items_out.write_text("".join(r.model_dump_json() + "\n" for r in report.items))
    if as_json:
        out.print_json(report.model_dump_json(exclude={"items"}))
    else:
        render.eval_report(out, report, wide=wide)


@app.command()
def demo(ctx: typer.Context) -> None:
    """A self-contained tour: supersede, history, as-of, rollback. In a throwaway data
    directory; with --uri, on that server in a throwaway group, erased at the end."""
    settings: Settings = ctx.obj
    home = Path(tempfile.mkdtemp(prefix="kg-demo-"))
    try:
        _run(run_demo(home, out, settings.uri))
    finally:
        shutil.rmtree(home, ignore_errors=True)


@app.command()
def tools(
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help="mcp, openai (Chat Completions), openai-responses (Responses API, Agents SDK) "
            "or anthropic (Messages API).",
        ),
    ] = "mcp",
) -> None:
    """Print kg's MCP tools as JSON tool definitions for another framework: the same names,
    descriptions and argument schemas an MCP client lists, for an agent built on the OpenAI
    or Anthropic SDK that calls kg through its HTTP API."""
    try:
        from kg.server.tool_export import exported
    except ImportError as exc:
        raise _serve_missing(exc) from None
    out.print_json(json.dumps(_run(exported(fmt))))


def _flowing(text: str) -> str:
    """Help text with each paragraph on one line: Typer keeps a docstring's line breaks, so
    without this the source's line length, not the terminal's, decided where lines end. A
    paragraph marked with Click's \\b stays as written."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


def _reflow_help(typer_app: typer.Typer) -> None:
    for info in typer_app.registered_commands:
        doc = info.help if isinstance(info.help, str) else inspect.getdoc(info.callback)
        if doc:
            info.help = _flowing(doc)
    if isinstance(typer_app.info.help, str):
        typer_app.info.help = _flowing(typer_app.info.help)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _reflow_help(group.typer_instance)


app.add_typer(config_app, name="config")
_reflow_help(app)


def main() -> None:
    # A terminal that cannot encode everything (PYTHONIOENCODING=ascii, a latin-1 locale)
    # shows what it cannot encode as escapes instead of failing mid-table.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and not render.writes_unicode(stream):
            stream.reconfigure(errors="backslashreplace")
    try:  # kg.toml: the defaults below the flags and the environment
        defaults = config_file.defaults_for(typer.main.get_command(app), sys.argv[1:])
    except KGError as exc:
        render.error(err, str(exc))
        sys.exit(1)
    app(default_map=defaults)
