"""Fuzzing the edges where input comes in: episode validation, the JSON Lines reader, the time
parsers, the Python API and the command line.

The property everywhere: any input gives success or a kg error (from the CLI: one line and exit
1; a usage error from the argument parser: exit 2), never another exception, never a raw
control character on the terminal; and rejected input writes nothing. Bounded: a few seconds
each (KG_THOROUGH=1 runs ten times as many examples).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kg import KG, InputError
from kg.cli import app
from kg.cli.app import read_episodes
from kg.errors import json_object
from kg.ingest import content_hash
from kg.ingest.relative_time import resolve_time
from kg.schemas.validation import GROUP_ID_RE, check_name
from kg.times import parse_time
from tests.cli_server import shared_server
from tests.memory_store import MemoryStore

SCALE = 10 if os.environ.get("KG_THOROUGH") else 1


def bounded(n: int) -> settings:
    return settings(
        max_examples=n * SCALE,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


# -- strategies -----------------------------------------------------------------------------

# Characters and pieces that broke kg once, or could: controls, escapes, separators, bidi,
# invisible letters, lone surrogates, markup, emoji codes, quotes.
PIECES = [
    "\x00",
    "\x07",
    "\x1b",
    "\x1b[31m",
    "\x1b]8;;http://x\x07",
    "\x9b",
    "\x85",
    "\u200b",
    "\u200d",
    "\u202e",
    "\u2066",
    "\u2028",
    "\u2029",
    "\ufeff",
    "\u3164",
    "\u0301",
    "\ud800",
    "\udcff",
    "[/x]",
    "[bold red]",
    "[/]",
    ":smile:",
    "\n",
    "\r",
    "\t",
    " ",
    "'",
    '"',
    "\\",
    "😀",
    "김",
    "Minji",
    "KNOWS",
    "LIVES_IN",
    "Person",
    "default",
    "$x",
    "})",
    "//",
    "0",
    "-1",
    "9" * 60,
]
ANY_CHAR = st.characters(exclude_categories=())  # surrogates included
TEXT = st.one_of(
    st.text(ANY_CHAR, max_size=20),
    st.lists(st.sampled_from(PIECES) | st.text(ANY_CHAR, max_size=4), max_size=6).map("".join),
)
OFFSETS = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
EXTREMES = [
    datetime(1, 1, 1),
    datetime(1, 1, 1, 23, 59),
    datetime(9999, 12, 31),
    datetime(9999, 12, 31, 23, 59, 59, 999999),
]
NAIVE = st.sampled_from(EXTREMES) | st.datetimes()
AWARE = st.builds(lambda d, tz: d.replace(tzinfo=tz), NAIVE, OFFSETS | st.just(UTC))
DATES = st.builds(
    lambda y, m, d: f"{y:04d}-{m:02d}-{d:02d}",
    st.integers(0, 9999),
    st.integers(0, 13),
    st.integers(0, 32),
)
TIME_TEXT = st.one_of(
    AWARE.map(datetime.isoformat),
    NAIVE.map(datetime.isoformat),
    DATES,
    DATES.map(lambda d: d[:7]),
    st.integers(0, 99999).map(str),
    st.builds(
        lambda n, u, ago: f"{'' if ago else 'in '}{n} {u}{' ago' if ago else ''}",
        st.integers(0, 10**12) | st.just("9" * 5000),
        st.sampled_from(["days", "weeks", "months", "years"]),
        st.booleans(),
    ),
    st.sampled_from(["last year", "next year", "last March", "next Tuesday", "today"]),
    TEXT,
)
# Built, not listed: hypothesis cannot print an integer of 4300+ digits.
HUGE_INTS = st.sampled_from([5000, 4400, 300]).map(lambda n: 10**n)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT | HUGE_INTS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
TIME_VALUE = TIME_TEXT | st.integers() | st.floats() | JSON_VALUES
NAMES = st.sampled_from(["Minji", "Busan", "[/x]", "김민지", "👩\u200d💻"]) | TEXT
FACT = st.fixed_dictionaries(
    {
        "subject": NAMES,
        "predicate": st.sampled_from(["KNOWS", "LIVES_IN", "likes"]) | TEXT,
        "object": NAMES,
    },
    optional={
        "valid_at": TIME_VALUE,
        "invalid_at": TIME_VALUE,
        "fact": TEXT,
        "subject_type": st.sampled_from(["Person", "Person\n", "bad type"]) | TEXT,
        "attributes": JSON_VALUES,
    },
)
EPISODE = st.fixed_dictionaries(
    {
        "source": st.sampled_from(["facts", "facts", "text", "message", "json"]) | TEXT,
        "reference_time": TIME_VALUE,
    },
    optional={
        "facts": st.lists(FACT, max_size=3) | JSON_VALUES,
        "content": TEXT | JSON_VALUES,
        "group_id": st.sampled_from(["default", "g\n", "g-1", ""]) | TEXT,
        "channel": st.sampled_from(["user", "tool", "x"]),
        "trust": st.sampled_from(["user", "agent", "9", 7, -1]) | HUGE_INTS | JSON_VALUES,
        "source_description": TEXT,
        "name": TEXT,
    },
)


def _dumps(value: Any, ascii_: bool) -> str:
    try:
        return json.dumps(value, ensure_ascii=ascii_)
    except ValueError:  # an integer too long to print: write it out as the digits it has
        return '{"trust": ' + "9" * 5000 + "}"


def deep(n: int) -> str:
    return "[" * n + "]" * n


LINE = st.one_of(
    st.builds(_dumps, EPISODE, st.booleans()),
    st.integers(1, 200_000).map(deep),
    st.integers(4290, 4310).map(lambda n: '{"trust": ' + "9" * n + "}"),
    st.sampled_from(['{"trust": NaN}', '{"a": Infinity}', "{", "", " ", "null", "[]"]),
    TEXT,
)
LINES = st.lists(LINE, min_size=1, max_size=4).map("\n".join)


def valid_time(d: datetime) -> bool:
    return d.tzinfo is UTC and 1 <= d.year <= 9999


# -- pure functions -----------------------------------------------------------------------------


@bounded(300)
@given(TIME_TEXT)
def test_parse_time_gives_a_utc_time_or_an_input_error(text: str) -> None:
    try:
        value = parse_time(text, field="valid-at")
    except InputError as exc:
        assert str(exc).startswith("valid-at: ")
    else:
        assert valid_time(value)


@bounded(300)
@given(TIME_TEXT, st.sampled_from(EXTREMES) | st.datetimes())
def test_llm_time_words_resolve_to_a_time_or_nothing(text: str, ref: datetime) -> None:
    value = resolve_time(text, ref.replace(tzinfo=UTC))
    assert value is None or (value.tzinfo is not None and 1 <= value.year <= 9999)


@bounded(300)
@given(LINE)
def test_json_object_gives_a_dict_or_an_input_error(line: str) -> None:
    try:
        assert isinstance(json_object(line, "f:1"), dict)
    except InputError as exc:
        assert str(exc).startswith("f:1: ")


@bounded(300)
@given(LINES)
def test_the_json_lines_reader_gives_valid_episodes_or_an_input_error(text: str) -> None:
    try:
        episodes = read_episodes(None, text, "default")
    except InputError as exc:
        assert str(exc).startswith("<stdin>")
        return
    for _, ep in episodes:
        assert GROUP_ID_RE.fullmatch(ep.group_id)
        assert valid_time(ep.reference_time)
        for f in ep.facts:
            assert check_name(f.subject) == f.subject and check_name(f.object) == f.object
            for d in (f.valid_at, f.invalid_at):
                assert d is None or valid_time(d)
        content_hash(ep)  # encodable: no lone surrogate anywhere


# -- the Python API -------------------------------------------------------------------------------

API_FIELDS = EPISODE.map(
    lambda ep: {k: v for k, v in ep.items() if k not in ("reference_time",)}
).flatmap(
    lambda ep: st.builds(lambda when: {**ep, "reference_time": when}, AWARE | NAIVE | TIME_TEXT)
)


@bounded(200)
@given(API_FIELDS)
def test_add_episode_accepts_or_refuses_and_refusing_writes_nothing(fields: dict[str, Any]) -> None:
    async def run() -> None:
        store = MemoryStore()
        async with KG(store) as kg:  # type: ignore[arg-type]
            try:
                await kg.add_episode(**fields, extract=False)
            except InputError:
                assert await kg.groups() == []
            else:
                [group] = await kg.groups()
                assert GROUP_ID_RE.fullmatch(group)

    asyncio.run(run())


READ_ARGS = st.fixed_dictionaries(
    {},
    optional={
        "subject": TEXT,
        "object": TEXT,
        "predicate": TEXT,
        "valid_at": AWARE | NAIVE,
        "known_at": AWARE | NAIVE,
        "group_id": st.sampled_from(["default", "g\n"]) | TEXT,
    },
)


@bounded(60)
@given(fields=API_FIELDS, reads=READ_ARGS, query=TEXT)
async def test_the_real_store_takes_any_call_or_refuses_it(
    kg: KG, fields: dict[str, Any], reads: dict[str, Any], query: str
) -> None:
    """The same, on FalkorDB (which must encode every string it is sent), with reads too."""
    before = (await kg.stats()).episodes
    try:
        await kg.add_episode(**fields, extract=False)
    except InputError:
        assert (await kg.stats()).episodes == before
    for call in (
        lambda: kg.facts(**reads),
        lambda: kg.history(**{k: v for k, v in reads.items() if "_at" not in k}),
        lambda: kg.search(query, **{k: v for k, v in reads.items() if k.endswith("_at")}),
        lambda: kg.why(query),
        lambda: kg.rollback([query]),
        lambda: kg.rollback_source(query, since=reads.get("valid_at")),
    ):
        with contextlib.suppress(InputError):
            await call()


# -- the command line ---------------------------------------------------------------------------

runner = CliRunner()
RAW = ["\x1b", "\x07", "\x9b", "\x85", "\u202e", "\u2028", "\ud800", "\udcff"]
ARG = TEXT | TIME_TEXT
FILE_BODY = st.one_of(LINES, st.binary(max_size=200).map(lambda b: b.decode("latin-1")))


def _options(*pairs: tuple[str, st.SearchStrategy[str]]) -> st.SearchStrategy[list[str]]:
    return st.lists(
        st.sampled_from(pairs).flatmap(lambda p: p[1].map(lambda v: [p[0], v])),
        max_size=3,
    ).map(lambda groups: [x for g in groups for x in g])


VIEW = _options(
    ("--subject", ARG),
    ("--predicate", ARG),
    ("--object", ARG),
    ("--valid-at", TIME_TEXT),
    ("--known-at", TIME_TEXT),
)
COMMAND = st.one_of(
    st.tuples(st.just(["facts"]), VIEW),
    st.tuples(
        st.tuples(st.just("as-of"), TIME_TEXT).map(list),
        _options(("--subject", ARG), ("--known-at", TIME_TEXT)),
    ),
    st.tuples(
        st.just(["history"]), _options(("--subject", ARG), ("--object", ARG), ("--limit", ARG))
    ),
    st.tuples(
        st.tuples(st.just("search"), ARG).map(list),
        _options(
            ("--valid-at", TIME_TEXT),
            ("--known-at", TIME_TEXT),
            ("--center", ARG),
            ("--recipe", st.sampled_from(["facts_bm25", "entities_hybrid_rrf"]) | ARG),
            ("--min-score", st.sampled_from(["nan", "inf", "-1", "0.5"]) | ARG),
            ("--limit", ARG),
        ),
    ),
    st.tuples(st.tuples(st.just("why"), ARG).map(list), st.just([])),
    st.tuples(st.tuples(st.just("rollback"), ARG).map(list), _options(("--apply", st.just("")))),
    st.tuples(
        st.just(["rollback"]),
        st.tuples(st.just("--source-description"), ARG, st.just("--since"), TIME_TEXT).map(list),
    ),
    st.tuples(st.just(["erase", "--yes", "--subject"]), ARG.map(lambda a: [a])),
    st.tuples(st.just(["log"]), _options(("--limit", ARG))),
    st.tuples(st.sampled_from([["stats"], ["quarantine"], ["communities", "list"]]), st.just([])),
    st.tuples(st.just(["ingest", "FILE"]), st.sampled_from([[], ["--no-extract"]])),
    st.tuples(st.just(["import", "FILE"]), _options(("--into", ARG))),
)
GLOBAL = _options(
    ("--group", st.sampled_from(["default", "g\n", "[/x]"]) | ARG),
    ("--ontology", st.just("ONTOLOGY")),
)
WRITES = {"ingest", "import", "rollback", "erase"}


def _argv(global_: list[str], command: tuple[list[str], list[str]], tmp: Path) -> list[str]:
    argv = [*global_, *command[0], *command[1]]
    argv = [a for a in argv if a != ""]  # '--apply' came with an empty value
    return [
        str(tmp / "in.jsonl") if a == "FILE" else str(tmp / "onto.json") if a == "ONTOLOGY" else a
        for a in argv
    ]


def _state() -> str:
    r = runner.invoke(app, ["stats", "--json"])
    assert r.exit_code == 0, r.stderr
    return r.stdout


@pytest.fixture
def seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    with shared_server(tmp_path / "home", monkeypatch):
        seed = tmp_path / "seed.jsonl"
        seed.write_text(
            "\n".join(
                json.dumps(
                    {
                        "source": "facts",
                        "reference_time": f"202{i}-01-01T00:00:00Z",
                        "facts": [
                            {"subject": "Minji", "predicate": "LIVES_IN", "object": city},
                            {
                                "subject": "[/x]",
                                "predicate": "KNOWS",
                                "object": "Minji",
                                "fact": "\x1b[31m[/x] knows Minji\u202e",
                            },
                        ],
                    }
                )
                for i, city in enumerate(["Seoul", "Busan"])
            )
        )
        assert runner.invoke(app, ["ingest", str(seed)]).exit_code == 0
        yield tmp_path


@bounded(30)
@given(global_=GLOBAL, command=COMMAND, body=FILE_BODY, ontology=FILE_BODY)
def test_any_command_line_gives_output_or_one_line_error(
    seeded: Path,
    global_: list[str],
    command: tuple[list[str], list[str]],
    body: str,
    ontology: str,
) -> None:
    # surrogatepass: a lone surrogate of any kind becomes bytes that are not UTF-8, as a
    # hostile file's would be (surrogateescape takes only \udc80-\udcff, and hypothesis
    # found '\ud800')
    (seeded / "in.jsonl").write_bytes(body.encode("utf-8", "surrogatepass"))
    (seeded / "onto.json").write_bytes(ontology.encode("utf-8", "surrogatepass"))
    argv = _argv(global_, command, seeded)
    write = command[0][0] in WRITES
    before = _state() if write else ""
    r = runner.invoke(app, argv, env={"COLUMNS": "200"})
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    for ch in RAW:
        assert ch not in r.stdout + r.stderr, (argv, ch)
    assert r.exit_code in (0, 1, 2), (argv, r.exit_code, r.stderr)
    if r.exit_code == 1:
        assert r.stderr.startswith("kg: error: ") and r.stderr.count("\n") == 1, (argv, r.stderr)
    if r.exit_code == 2:
        assert "Usage" in r.stderr or "Error" in r.stderr, (argv, r.stderr)
    if write and r.exit_code != 0:
        assert _state() == before, argv
