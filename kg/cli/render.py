"""Everything `kg` prints: tables, summaries and reports, each to the console it is given.

Commands (kg.cli.app) decide what to fetch; this module decides how it looks. It imports
models only, never the app, so the demo and the commands share one look.

What is printed is mostly data, and data is hostile: a stored name may read `[/x]` (Rich
markup, which would crash the table) or carry terminal escape sequences. `SafeConsole` is the
one place that handles it: every string it renders passes through `clean`, and it never reads
markup or emoji codes in strings; styling is given as `Text` styles instead.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from rich import box
from rich.console import Console
from rich.highlighter import JSONHighlighter, NullHighlighter
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from kg.erasure import ErasureReceipt
from kg.eval import EvalReport
from kg.eval.metrics import Rate
from kg.facade import BulkResult, CommunityReport, QuarantineEntry
from kg.graphiti import AdoptReport
from kg.ingest.doctor import DoctorReport
from kg.placement import PlacementRow
from kg.queue import WorkerStats
from kg.retrieval import SearchResults
from kg.retrieval.context import quote
from kg.retrieval.search import NO_EMBEDDER
from kg.rollback import FactChange, ReplayReport, RollbackReport
from kg.schemas.graph import AuditEvent, Fact
from kg.schemas.keys import ApiKeyRecord
from kg.schemas.metrics import Metrics
from kg.schemas.store import Community, StoreStats
from kg.schemas.timefmt import day, interval
from kg.schemas.views import episode_view, fact_view, hit_views
from kg.store.falkordb.embedded import LoadProgress
from kg.transfer import TransferReport

TIME = "%Y-%m-%d %H:%M:%S"

# What must not reach a terminal as it is: C0 controls other than tab and newline (ESC starts
# colour, cursor and OSC 8 hyperlink sequences, BEL ends them), DEL and the C1 controls (0x9b
# is a one-byte CSI), bidi controls (they reorder what follows them), zero-width spaces and
# word joiners (they hide a difference), line and paragraph separators, and lone surrogates
# (no encoding can write them). Each is shown as its escape, e.g. \x1b or \u202e.
_UNSAFE = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e\u2060-\u2069"
    r"\ufeff\ud800-\udfff]"
)


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text: str) -> str:
    """`text` with every character a terminal would act on, or hide, shown as its escape."""
    return _UNSAFE.sub(_escape, text)


def _u(m: re.Match[str]) -> str:
    code = ord(m.group())
    if code > 0xFFFF:  # JSON spells a character beyond the BMP as its UTF-16 surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def escape_json(text: str, *, ascii_only: bool = False) -> str:
    """JSON text with every unsafe character (every non-ASCII one too, with `ascii_only`) as
    its \\u escape: the same values when parsed. Outside strings JSON is ASCII, so every such
    character is inside a string."""
    return (_NON_ASCII if ascii_only else _UNSAFE).sub(_u, text)


def writes_unicode(stream: object) -> bool:
    """Whether a text stream encodes all of Unicode (UTF-8 and kin), e.g. not LANG=C on an old
    Python or PYTHONIOENCODING=latin-1."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    return encoding.lower().replace("-", "").replace("_", "").startswith("utf")


def one_line(text: str) -> str:
    """`clean`, with newlines and tabs escaped too: for messages that must stay one line."""
    return clean(text).replace("\n", "\\n").replace("\t", "\\t")


class _Environ(Mapping[str, str]):
    """os.environ as Rich reads it, live, less a COLUMNS or LINES that is not a positive
    number: COLUMNS=0 (set by some CI runners and editors) makes Rich print nothing at all."""

    def __getitem__(self, key: str) -> str:
        value = os.environ[key]
        if key in ("COLUMNS", "LINES") and not (value.isdigit() and int(value) > 0):
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(os.environ)

    def __len__(self) -> int:
        return len(os.environ)


class SafeConsole(Console):
    """A Rich console for data: strings (printed, table cells, titles) are `clean`ed and never
    read as markup or emoji codes, unless a call asks for markup; JSON is escaped the same way,
    as \\u escapes, so it still parses to the very same values."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**{"markup": False, "emoji": False, "_environ": _Environ(), **options})

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(clean(text), **options)

    def print_json(
        self,
        json: str | None = None,
        *,
        data: Any = None,
        indent: int | str | None = 2,
        highlight: bool = True,
        skip_keys: bool = False,
        ensure_ascii: bool = False,
        check_circular: bool = True,
        allow_nan: bool = True,
        default: Callable[[Any], Any] | None = None,
        sort_keys: bool = False,
    ) -> None:
        from rich.json import JSON

        options: dict[str, Any] = dict(
            indent=indent,
            highlight=False,
            skip_keys=skip_keys,
            ensure_ascii=ensure_ascii,
            check_circular=check_circular,
            allow_nan=allow_nan,
            default=default,
            sort_keys=sort_keys,
        )
        rendered = JSON(json, **options) if json is not None else JSON.from_data(data, **options)
        escaped = escape_json(rendered.text.plain, ascii_only=not writes_unicode(self.file))
        rendered.text = (JSONHighlighter() if highlight else NullHighlighter())(escaped)
        rendered.text.no_wrap = True
        rendered.text.overflow = None
        self.print(rendered, soft_wrap=True)


def note(console: Console, message: str) -> None:
    """A one-line note on stderr (a deprecated flag); the command goes on."""
    console.print(Text.assemble(("kg: note:", "yellow"), " ", one_line(message)), soft_wrap=True)


def error(console: Console, message: str) -> None:
    """A kg error: one line, the message shown as written."""
    console.print(Text.assemble(("kg: error:", "bold red"), " ", one_line(message)), soft_wrap=True)


def _table(title: str, columns: Sequence[str], **options: Any) -> Table:
    table = Table(title=title, title_justify="left", **options)
    for col in columns:
        table.add_column(col)
    return table


def _json(console: Console, rows: Sequence[Any]) -> None:
    console.print_json(json.dumps(list(rows)))


SHORT_ID = 8  # characters of an id a table shows; any unique prefix of 6+ is accepted back


def short(uuid: str | None) -> str:
    return (uuid or "")[:SHORT_ID]


def fact_rows(found: Sequence[Fact]) -> list[dict[str, Any]]:
    """The facts as every surface's JSON shows them (kg.schemas.views.FactView)."""
    return [json.loads(fact_view(f).model_dump_json()) for f in found]


def _span(start: Any, end: Any) -> str:
    """An interval on two lines ('start' / '→ end'), so a table fits 80 columns."""
    return f"{day(start)}\n→ {day(end)}"


def facts(
    console: Console,
    found: list[Fact],
    *,
    as_json: bool,
    title: str,
    transaction: bool = False,
) -> None:
    """A table of facts that fits 80 columns: ids kept whole (8 characters, accepted back by
    `kg why`), the statement in one column with its trust and notes under it, the intervals
    on two lines."""
    if as_json:
        _json(console, fact_rows(found))
        return
    if not found:
        console.print(f"{title}: no facts")
        return
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("id", no_wrap=True, min_width=SHORT_ID)
    table.add_column("fact", overflow="fold", ratio=1)
    table.add_column("valid", no_wrap=True)
    if transaction:
        table.add_column("believed", no_wrap=True)
    for f in found:
        e = f.edge
        note = [e.trust.name]
        if e.status.value == "contested":
            note.append("contested")
        if e.invalidated_by:
            note.append(f"closed by {short(e.invalidated_by)}")
        statement = f"{f.subject} {f.predicate} {f.object}\n({', '.join(note)})"
        row = [short(e.fact_uuid), statement, _span(e.valid_at, e.invalid_at)]
        if transaction:
            row.append(_span(e.created_at, e.expired_at))
        table.add_row(*row)
    console.print(table)


@contextmanager
def progress(
    console: Console, total: int, label: str = "ingesting"
) -> Iterator[Callable[[int, int], None]]:
    """A progress bar; yields the `on_progress(done, total)` that moves it."""
    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("ingest", total=total)
        yield lambda done, _total: bar.update(task, completed=done)


def ingest(console: Console, r: BulkResult) -> None:
    if r.queued:
        console.print(
            f"queued {r.queued} episodes ({r.duplicate} already present, {r.added} stored "
            "unextracted): searchable now, extracted by `kg worker`",
            soft_wrap=True,
        )
        return
    parts = [
        f"ingested {r.added} episodes ({r.duplicate} already present): {r.facts_added} facts "
        f"added, {r.facts_closed} closed, {r.facts_contested} contested"
    ]
    if r.llm_calls:
        parts.append(f"; {r.llm_calls} LLM calls, {r.tokens} tokens")
    if r.failed:
        parts.append(f"; {len(r.failed)} failed extraction (recorded; re-run to retry)")
    console.print("".join(parts), soft_wrap=True)
    for failure in r.failed:
        console.print(f"  {one_line(failure)}", soft_wrap=True)


def stats(console: Console, s: StoreStats, m: Metrics, *, as_json: bool) -> None:
    ingest, queries = m.ingest, m.queries
    derived = {
        "ingest": {
            "llm_calls_per_episode": ingest.llm_calls_per_episode,
            "empty_extraction_rate": ingest.empty_extraction_rate,
        },
        "queries": {
            "mean_latency_ms": queries.mean_latency_ms,
            "mean_context_tokens": queries.mean_context_tokens,
        },
    }
    api = {
        kind: {
            name: c.model_dump() | {"mean_latency_ms": c.mean_latency_ms}
            for name, c in sorted(calls.items())
        }
        for kind, calls in (("routes", m.api.routes), ("tools", m.api.tools))
    }
    if as_json:
        body = s.model_dump(mode="json")
        body["ingest"] = ingest.model_dump() | derived["ingest"]
        body["queries"] = queries.model_dump() | derived["queries"]
        body["api"] = api
        body["queue"] = m.queue.model_dump()
        console.print_json(json.dumps(body))
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
    for kind, label in (("routes", "api"), ("tools", "mcp tool")):
        if api[kind]:
            table.add_section()
        for name, c in api[kind].items():
            mean = c["mean_latency_ms"]
            shown = f"{c['calls']} calls, {c['errors']} errors"
            table.add_row(f"{label}: {name}", shown + (f", {mean:.3g} ms mean" if mean else ""))
    table.add_section()
    for key, value in m.queue.model_dump(exclude={"failures_by_reason"}).items():
        shown = "-" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)
        table.add_row(f"queue: {key.replace('_', ' ')}", shown)
    for reason, count in sorted(m.queue.failures_by_reason.items()):
        table.add_row(f"queue: failures {reason.replace('_', ' ')}", str(count))
    console.print(table)


def worker(console: Console, s: WorkerStats) -> None:
    console.print(
        f"worker: {s.completed} episodes written, {s.retried} attempts to retry, {s.failed} "
        f"failed, {s.lease_lost} taken over by another worker, {s.released} handed back; "
        f"{s.llm_calls} LLM calls",
        soft_wrap=True,
    )


def doctor(console: Console, r: DoctorReport, *, as_json: bool) -> None:
    if as_json:
        console.print_json(
            json.dumps(
                {
                    **r.model_dump(),
                    "valid_rate": round(r.valid_rate, 3),
                    "usable": r.usable,
                    "verdict": r.verdict,
                }
            )
        )
        return
    table = _table(f"LLM doctor: {r.model}", ["", "value"])
    rows = (
        ("prompt profile", r.profile),
        ("reply format", r.json_mode or "-"),
        ("turns / calls", f"{r.turns} / {r.calls}"),
        ("valid replies", f"{r.valid_replies} of {r.calls} ({r.valid_rate:.0%})"),
        ("facts proposed / kept", f"{r.facts_proposed} / {r.facts_kept}"),
        ("expected facts kept", f"{r.facts_found} of {r.facts_expected}"),
        ("dropped", ", ".join(f"{k} {v}" for k, v in r.dropped.items()) or "none"),
        ("seconds a call", f"{r.seconds_per_call:.1f}"),
    )
    for name, value in rows:
        table.add_row(name, clean(value))
    console.print(table)
    for e in r.errors:
        console.print(f"  failed: {clean(one_line(e))}", soft_wrap=True)
    console.print(clean(r.verdict), soft_wrap=True)


def adoption(console: Console, r: AdoptReport) -> None:
    if r.already_adopted:
        console.print(f"group {r.group_id}: already adopted, nothing new")
        return
    console.print(
        f"adopted group {r.group_id}: {r.entities} entities, {r.episodes} episodes, "
        f"{r.edges} edges; {r.closures} closures ({r.closures_unattributed} without a known "
        f"closing episode); {r.versions_created} versions created and {r.versions_deleted} "
        "replaced by replay" + (f"; {r.facts_skipped} facts skipped" if r.facts_skipped else ""),
        soft_wrap=True,
    )


def imported(console: Console, r: TransferReport) -> None:
    counts = ", ".join(f"{v} {k}" for k, v in r.counts.items() if v)
    console.print(f"imported into group {r.group_id}: {counts}")


def community_build(console: Console, r: CommunityReport) -> None:
    parts = [
        f"{r.communities} communities: {r.summarized} summarised, {r.kept} unchanged, "
        f"{r.deleted} replaced or removed"
    ]
    if r.llm_calls:
        parts.append(f"; {r.llm_calls} LLM calls, {r.prompt_tokens + r.completion_tokens} tokens")
    if r.errors:
        parts.append(f"; {len(r.errors)} summaries fell back to extractive")
    console.print("".join(parts), soft_wrap=True)


def community_list(console: Console, group: str, found: list[Community], *, as_json: bool) -> None:
    if as_json:
        exclude = {"name_embedding"}
        _json(
            console,
            [
                {**c.node.model_dump(mode="json", exclude=exclude), "members": c.members}
                for c in found
            ],
        )
        return
    if not found:
        console.print("no communities; build them with `kg communities build`")
        return
    table = _table(f"communities of {group}", ("name", "members", "summary", "stale"))
    for c in found:
        table.add_row(
            c.node.name, str(len(c.members)), c.node.summary, "yes" if c.node.stale else ""
        )
    console.print(table)


def quarantine(console: Console, group: str, held: list[QuarantineEntry], *, as_json: bool) -> None:
    if as_json:
        _json(console, [e.model_dump(mode="json") for e in held])
        return
    if not held:
        console.print(Text(f"quarantine of {group}: empty"))
        return
    columns = ("time", "channel", "kind", "rule", "text", "episode", "source")
    table = _table(f"quarantine of {group}", columns)
    for e in held:
        # Hostile by definition: quoted as data (controls and bidi escaped), never markup.
        table.add_row(
            e.created_at.strftime(TIME),
            e.channel.value,
            e.item.kind,
            e.item.reason,
            Text(quote(e.item.text)),
            e.episode_uuid,
            Text(quote(e.source_description)),
        )
    console.print(table)


def _change(c: FactChange) -> str:
    return f"{c.subject} {c.predicate} {c.object} {interval(c.valid_at, c.invalid_at)} ({c.status})"


def rollback(console: Console, report: RollbackReport) -> None:
    if report.noop:
        already = ", ".join(report.already_rolled_back)
        console.print(
            f"nothing to roll back{f' (already rolled back: {already})' if already else ''}"
        )
        return
    verb = "rolled back" if report.applied else "would roll back"
    if report.episodes:
        console.print(f"{verb} {len(report.episodes)} episode(s): {', '.join(report.episodes)}")
    if report.cancelled:
        verb = "cancelled" if report.applied else "would cancel"
        console.print(
            f"{verb} {len(report.cancelled)} episode(s) not yet written "
            f"(queued or failed): {', '.join(report.cancelled)}"
        )
    sections = (
        ("removed", report.removed, "red"),
        ("re-opened / restored", report.restored, "green"),
    )
    for title, rows, style in sections:
        if not rows:
            continue
        table = _table(
            title, ("subject", "predicate", "object", "valid", "status"), title_style=style
        )
        for c in rows:
            valid = interval(c.valid_at, c.invalid_at)
            table.add_row(c.subject, c.predicate, c.object, valid, c.status)
        console.print(table)
    console.print(
        f"fact versions: {report.versions_deleted} deleted, {report.versions_reopened} re-opened, "
        f"{report.versions_created} created, {report.versions_kept} untouched"
    )
    if not report.applied:
        console.print("dry run: nothing changed. Re-run with --apply to carry it out.")


def replay(console: Console, report: ReplayReport) -> None:
    console.print(
        f"replayed {report.episodes} episodes: {report.versions_matching} fact versions "
        "match the live graph"
    )
    if report.identical:
        console.print("the live graph equals its replay")
        return
    sides = (
        ("only in the live graph", report.only_in_graph),
        ("only in the replay", report.only_in_replay),
    )
    for label, rows in sides:
        for c in rows:
            console.print(f"  {label}: {_change(c)}")
    counts = f"{report.versions_deleted} versions to delete, {report.versions_created} to create"
    console.print(counts + ("; applied" if report.applied else "; dry run, re-run with --apply"))


def why(
    console: Console,
    fact_id: str,
    versions: list[Fact],
    episodes: Sequence[Any],
    *,
    as_json: bool = False,
) -> None:
    if as_json:
        body = {
            "id": versions[0].edge.fact_uuid if versions else fact_id,
            "versions": fact_rows(versions),
            "episodes": [json.loads(episode_view(ep).model_dump_json()) for ep in episodes],
        }
        console.print_json(json.dumps(body))
        return
    facts(console, versions, as_json=False, title=f"versions of {fact_id}", transaction=True)
    table = Table(title="episodes", title_justify="left")
    table.add_column("episode", no_wrap=True, min_width=SHORT_ID)
    table.add_column("reference time\ningested", no_wrap=True)
    table.add_column("channel / trust\nextractor", overflow="fold")
    table.add_column("status", overflow="fold")
    table.add_column("source", overflow="fold")
    for ep in episodes:
        table.add_row(
            short(ep.uuid),
            f"{day(ep.valid_at)}\n{ep.created_at.strftime(TIME)}",
            f"{ep.channel.value} / {ep.trust.name}\n{ep.extractor}",
            ep.status.value,
            ep.source_description,
        )
    console.print(table)


def log(console: Console, events: list[AuditEvent], *, as_json: bool) -> None:
    if as_json:
        _json(console, [e.model_dump(mode="json") for e in events])
        return
    if not events:
        console.print("audit log: empty")
        return
    table = _table("audit log", ("time", "kind", "episodes", "detail"))
    for e in events:
        table.add_row(e.created_at.strftime(TIME), e.kind, ", ".join(e.episodes), e.detail)
    console.print(table)


def erasure(console: Console, target: str, receipt: ErasureReceipt) -> None:
    if receipt.dry_run:
        console.print(
            f"would erase {target}: {receipt.episodes_deleted} episodes "
            f"({receipt.queue_records_deleted} still queued), {receipt.entities_deleted} "
            f"entities, {receipt.fact_versions_deleted} fact versions",
            markup=False,
            highlight=False,
        )
        _other_facts(console, receipt)
        console.print("dry run: nothing erased.")
        return
    when = f" at {receipt.compacted_at:%Y-%m-%d %H:%M:%S} UTC" if receipt.compacted_at else ""
    resumed = "; finished an erasure a crash had interrupted" if receipt.resumed else ""
    console.print(
        f"erased {target}: {receipt.episodes_deleted} episodes, {receipt.entities_deleted} "
        f"entities, {receipt.fact_versions_deleted} fact versions deleted; "
        f"{receipt.other_facts_recomputed} other facts recomputed; "
        + ("store files compacted" if receipt.files_compacted else "store files NOT compacted")
        + (when if receipt.files_compacted else "")
        + resumed,
        markup=False,
        highlight=False,
    )
    _other_facts(console, receipt)
    if receipt.residue:
        console.print(f"note: {receipt.residue}", markup=False, highlight=False)


def _other_facts(console: Console, receipt: ErasureReceipt) -> None:
    """The facts about other subjects that go (or, kept, stay) with the erased episodes."""
    go = "would go" if receipt.dry_run else "went"
    sections = (
        (f"facts about other subjects that {go} with its episodes", receipt.other_facts_removed),
        ("facts about other subjects kept, from redacted copies", receipt.other_facts_kept),
    )
    for title, rows in sections:
        if not rows:
            continue
        table = _table(title, ("subject", "predicate", "object", "valid"))
        for c in rows:
            table.add_row(c.subject, c.predicate, c.object, interval(c.valid_at, c.invalid_at))
        console.print(table)
    if receipt.other_facts_removed and receipt.dry_run:
        console.print("--keep-others keeps them (re-asserted from redacted copies).")


def loading(console: Console, every: float = 5.0) -> Callable[[LoadProgress], None]:
    """The `progress` callback for KG.open: a line every `every` seconds while a large store
    loads (nothing for a quick start)."""
    shown = [0.0]

    def report(p: LoadProgress) -> None:
        if p.elapsed_seconds - shown[0] >= every:
            shown[0] = p.elapsed_seconds
            console.print(p.line(), markup=False, highlight=False)

    return report


def search(console: Console, results: SearchResults, *, explain: bool) -> None:
    if explain:
        table = _table("branches", ("scope", "method", "hits", "ms", "note"))
        for b in results.branches:
            note = b.error or ("no hits" if b.hits == 0 else "")
            if note == NO_EMBEDDER:  # the CLI's way to one, not another surface's
                note += " (give --embedder minilm, or the group's model)"
            table.add_row(b.scope.value, b.method, str(b.hits), f"{b.latency_ms:.1f}", note)
        console.print(table)
        if results.time is not None:
            console.print(
                f"time words (asked at {results.time.asked_at:%Y-%m-%d %H:%M}Z):", markup=False
            )
            for line in results.time.describe():
                console.print(f"  {line}", markup=False, highlight=False)
    sections: list[tuple[str, list[tuple[Any, str, str]]]] = [
        (
            "facts",
            [
                (
                    h,
                    h.fact.edge.fact + (" (closed)" if h.closed else ""),
                    interval(h.fact.edge.valid_at, h.fact.edge.invalid_at),
                )
                for h in results.facts
            ],
        ),
        ("entities", [(h, h.entity.name, "") for h in results.entities]),
        (
            "episodes",
            [
                (h, h.episode.content[:120], h.episode.valid_at.strftime("%Y-%m-%d"))
                for h in results.episodes
            ],
        ),
        ("communities", [(h, h.community.name, "") for h in results.communities]),
    ]
    shown = False
    for name, rows in sections:
        if not rows:
            continue
        shown = True
        table = _table(name, ())
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
                ranks = ", ".join(f"{m} #{r}" for m, r in hit.ranks.items())
                factors = [
                    f"{name} x{f:.2f}"
                    for name, f in (
                        ("trust", getattr(hit, "trust_factor", 1.0)),
                        ("recency", getattr(hit, "recency_factor", 1.0)),
                    )
                    if f != 1.0
                ]
                if getattr(hit, "in_window", False):
                    factors.append("in time window")
                row += [f"{hit.fused_score:.4f}", "; ".join([ranks, *factors])]
            table.add_row(*row)
        console.print(table)
    for scope, checks in results.abstain_checks.items():
        for check in checks:  # a refusal always; with --explain, the tests passed too
            if check.abstained or explain:
                console.print(f"{scope.value}: {check.why()}", markup=False, highlight=False)
    if not shown:
        console.print("no results")


def search_json(console: Console, results: SearchResults) -> None:
    """Search results as JSON: every hit in the one hit shape (kg.schemas.views.HitView),
    best first, with how the query's time words were read and what abstained."""
    body: dict[str, Any] = {
        "query": results.query,
        "group_id": results.group_id,
        "hits": [json.loads(h.model_dump_json()) for h in hit_views(results)],
        "abstained": {k.value: v for k, v in results.abstained.items()},
        "abstain_checks": {
            k.value: [c.model_dump(mode="json") for c in v]
            for k, v in results.abstain_checks.items()
        },
        "time": results.time.model_dump(mode="json") if results.time else None,
        "branches": [b.model_dump(mode="json") for b in results.branches],
    }
    console.print_json(json.dumps(body))


def context(console: Console, block: str) -> None:
    console.print(block, markup=False, highlight=False, soft_wrap=True)


def placements(console: Console, rows: Sequence[PlacementRow], *, as_json: bool) -> None:
    """`kg placement show`: each group, its store, a move under way."""
    if as_json:
        _json(console, [r.model_dump(mode="json") for r in rows])
        return
    if not rows:
        console.print("no groups yet (a group is placed on the first store by its first write)")
        return
    table = _table("placements", ["group", "store", "note"])
    for r in rows:
        note = "moving" if r.moving else ("" if r.placed else "no row: on the default store")
        table.add_row(r.group_id, r.store, note)
    console.print(table)


def keys(console: Console, records: Sequence[ApiKeyRecord], *, as_json: bool) -> None:
    """Key records: ids, groups, roles; never a key or its hash."""
    rows = [r.model_dump(mode="json", exclude={"key_hash"}) for r in records]
    if as_json:
        _json(console, rows)
        return
    if not rows:
        console.print("no API keys (create one with `kg keys create --group G --role R`)")
        return
    table = _table("API keys", ["key id", "group", "role", "channel", "name", "created", "revoked"])
    for r in records:
        table.add_row(
            r.key_id,
            r.scope,
            r.role.value,
            r.channel.value,
            r.name,
            r.created_at.strftime(TIME),
            r.revoked_at.strftime(TIME) if r.revoked_at else "",
        )
    console.print(table)


def eval_report(console: Console, report: EvalReport, *, wide: bool = False) -> None:
    """The report's rows: by default in 80 columns (each rate's Wilson interval under it,
    rounded; answers in a table of their own; no latency), `wide` as one line a row with
    every column."""
    title = (
        f"kg eval: {report.name} ({report.mode.value} ingest, k={report.k}, abstain below "
        f"{report.abstain_below}"
        + (f", joint below {report.abstain_joint_below}" if report.abstain_joint_below else "")
        + f", embedder {report.embedder or 'none'})"
    )
    if wide:
        _eval_wide(console, report, title)
    else:
        console.print(title, markup=False, highlight=False)
        _eval_narrow(console, report)
    for note in report.notes:
        console.print(f"note: {note}", markup=False)


def _rate(r: Rate | None) -> str:
    """'12.5' over its Wilson 95% interval in whole percent, '2-47'."""
    if r is None or r.interval is None:
        return "—"
    lo, hi = r.interval
    return f"{100 * r.k / r.n:.1f}\n{100 * lo:.0f}-{100 * hi:.0f}"


def _eval_narrow(console: Console, report: EvalReport) -> None:
    def table(cols: list[str]) -> Table:
        t = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
        for i, col in enumerate(cols):
            t.add_column(col, justify="left" if i == 0 else "right", no_wrap=True)
        return t

    retrieval = table(
        [
            "type",
            "n",
            f"recall\n@{report.k}",
            "stale\nin ctx",
            "stale\nquoted",
            "gold\nin ctx",
            "abst\nitems",
            "abst\nothers",
            "tokens",
        ]
    )
    llm = any(r.answer is not None for r in report.rows)
    answers = table(["type", "n", "answer\ncorrect", "answer\nstale"])
    system = None
    for r in report.rows:
        if r.system is not system:
            system = r.system
            for t in (retrieval, answers):
                if t.row_count:
                    t.add_section()
                t.add_row(Text(system.value, style="bold"))
        kind = f"  {r.type}"
        retrieval.add_row(
            kind,
            str(r.items),
            _rate(r.recall),
            _rate(r.stale),
            _rate(r.stale_quoted),
            _rate(r.gold),
            _rate(r.abstain),
            _rate(r.false_abstain),
            f"{r.tokens_mean:.0f}",
        )
        answers.add_row(kind, str(r.items), _rate(r.answer), _rate(r.answer_stale))
    console.print(retrieval)
    console.print(
        "% over its Wilson 95% interval; recall pooled over evidence turns; abst: context "
        "left empty, on abstain items / on the others; --wide adds latency, --json has every "
        "figure",
        markup=False,
        highlight=False,
    )
    if llm:
        console.print(answers)


def _eval_wide(console: Console, report: EvalReport, title: str) -> None:
    llm = any(r.answer is not None for r in report.rows)
    cols = [
        "system",
        "type",
        "items",
        f"evidence recall@{report.k}",
        "stale in context",
        "stale quoted",
        "gold in context",
        "abstained: abstain items",
        "abstained: others",
        "tokens",
        "p50 ms",
        "p95 ms",
    ]
    cols += ["answer correct", "answer stale"] if llm else []
    table = _table(title, cols, caption="% [Wilson 95%]; recall pooled over evidence turns")
    for r in report.rows:
        row = [
            r.system.value,
            r.type,
            str(r.items),
            r.recall.show(),
            r.stale.show(),
            r.stale_quoted.show(),
            r.gold.show(),
            r.abstain.show(),
            r.false_abstain.show(),
            f"{r.tokens_mean:.0f}",
            f"{r.p50_ms:.1f}",
            f"{r.p95_ms:.1f}",
        ]
        if llm:
            row += [
                r.answer.show() if r.answer else "—",
                r.answer_stale.show() if r.answer_stale else "—",
            ]
        table.add_row(*row)
    console.print(table)
