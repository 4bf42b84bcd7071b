"""The `kg` command line: ingest, reads, and one-line errors with no partial writes.

Commands that reach the store run on both backends (`where`: `--home DIR` for the embedded
FalkorDB, `--uri bolt://...` for the session's Neo4j); argument errors caught before any
store is opened, and the data directory lock, run once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kg.cli import app
from kg.retrieval import RECIPES
from kg.store.falkordb import FalkorDBStore
from tests.conftest import Backend

runner = CliRunner()


def kg(where: Path | list[str], *args: str, input: str | None = None) -> tuple[int, str, str]:
    """Run the CLI on a store: a data directory, or global options that select one."""
    base = ["--home", str(where)] if isinstance(where, Path) else where
    r = runner.invoke(app, [*base, *args], input=input)
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture
def where(backend: Backend, home: Path) -> list[str]:
    return backend.cli_args(home)


def episode(ref: str, *facts: tuple[str, str, str], **extra: object) -> str:
    rows = [{"subject": s, "predicate": p, "object": o} for s, p, o in facts]
    return json.dumps({"source": "facts", "reference_time": ref, "facts": rows, **extra})


@pytest.fixture
def jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "episodes.jsonl"
    # Deliberately out of reference-time order: ingest sorts per group.
    path.write_text(
        "\n".join(
            [
                episode("2024-06-01T00:00:00Z", ("Minji", "LIVES_IN", "Busan")),
                episode(
                    "2021-03-02T00:00:00Z",
                    ("Minji", "LIVES_IN", "Seoul"),
                    ("Minji", "WORKS_AT", "Naver"),
                ),
                "",
            ]
        )
    )
    return path


def test_ingest_then_query_every_view(where: list[str], jsonl: Path) -> None:
    code, out, _ = kg(where, "ingest", str(jsonl))
    assert code == 0, out
    assert "ingested 2 episodes (0 already present): 3 facts added, 1 closed" in out

    code, out, _ = kg(where, "facts", "--subject", "minji", "--predicate", "lives in", "--json")
    assert code == 0
    assert [r["object"] for r in json.loads(out)] == ["Busan"]

    code, out, _ = kg(where, "as-of", "2023-03-15", "--subject", "Minji", "--json")
    assert sorted(r["object"] for r in json.loads(out)) == ["Naver", "Seoul"]

    code, out, _ = kg(where, "history", "--predicate", "LIVES_IN", "--json")
    rows = json.loads(out)
    assert [r["object"] for r in rows] == ["Seoul", "Seoul", "Busan"]
    assert rows[1]["valid_to"] == "2024-06-01T00:00:00Z" and rows[1]["status"] == "closed"

    code, out, _ = kg(where, "stats", "--json")
    assert json.loads(out)["current_facts"] == 2

    code, out, _ = kg(where, "ingest", str(jsonl))  # resumable: everything is already there
    assert "ingested 0 episodes (2 already present)" in out

    code, out, _ = kg(where, "facts", "--subject", "Minji")
    assert code == 0 and "Busan" in out and "Naver" in out


def test_known_at_from_the_cli(where: list[str], jsonl: Path) -> None:
    kg(where, "ingest", str(jsonl))
    code, out, _ = kg(where, "facts", "--known-at", "2001-01-01", "--json")
    assert code == 0 and json.loads(out) == []  # nothing was known in 2001


def test_ingest_from_stdin_uses_the_group_option(where: list[str]) -> None:
    data = episode("2020-01-01T00:00:00Z", ("A", "KNOWS", "B"))
    code, out, _ = kg(where, "--group", "team-7", "ingest", "-", input=data)
    assert code == 0, out
    _, out, _ = kg(where, "--group", "team-7", "stats", "--json")
    assert json.loads(out)["episodes"] == 1
    _, out, _ = kg(where, "stats", "--json")
    assert json.loads(out)["episodes"] == 0
    assert json.loads(kg(where, "groups", "--json")[1]) == ["team-7"]
    assert kg(where, "groups")[1] == "team-7\n"


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"source": "facts", "reference_time": ', "episodes.jsonl:2: malformed JSON"),
        ("[1, 2]", "episodes.jsonl:2: expected a JSON object"),
        (episode("2020-01-99", ("A", "KNOWS", "B")), "reference_time: '2020-01-99' is not a date"),
        (episode("2020-01-01T00:00:00Z", ("A", "!!", "B")), "facts[0]: predicate"),
        (
            json.dumps(
                {"source": "text", "content": "hi", "reference_time": "2020-01-01T00:00:00Z"}
            ),
            "episodes need an LLM",
        ),
        (episode("2020-01-01T00:00:00Z", ("A", "KNOWS", "B"), group_id="no spaces"), "group_id"),
        # Numbers are never times (2021 would be Unix second 2021, in 1970).
        (
            json.dumps({"source": "facts", "reference_time": 2021, "facts": []}),
            "reference_time: Value error, 2021 is a number, not a time",
        ),
        (
            json.dumps(
                {
                    "source": "facts",
                    "reference_time": "2021-01-01T00:00:00Z",
                    "facts": [{"subject": "A", "predicate": "KNOWS", "object": "B", "valid_at": 1}],
                }
            ),
            "facts.0.valid_at: Value error, 1 is a number, not a time",
        ),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    where: list[str], tmp_path: Path, bad_line: str, message: str
) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text(episode("2020-01-01T00:00:00Z", ("Good", "KNOWS", "Line")) + "\n" + bad_line)
    code, out, err = kg(where, "ingest", str(path))
    assert code == 1
    assert message in err
    assert err.startswith("kg: error:") and err.strip().count("\n") == 0
    _, out, _ = kg(where, "stats", "--json")
    assert json.loads(out)["episodes"] == 0  # the good first line was not written either


def test_unknown_predicate_with_a_strict_ontology(where: list[str], tmp_path: Path) -> None:
    onto = tmp_path / "onto.json"
    onto.write_text(
        json.dumps(
            {
                "name": "hr",
                "strict": True,
                "predicates": [{"name": "WORKS_AT", "cardinality": "one"}],
            }
        )
    )
    path = tmp_path / "e.jsonl"
    path.write_text(episode("2020-01-01T00:00:00Z", ("A", "LIKES", "B")))
    code, _, err = kg(where, "--ontology", str(onto), "ingest", str(path))
    assert code == 1 and "unknown predicate 'LIKES'" in err and "WORKS_AT" in err


def test_bad_ontology_file_is_named(home: Path, tmp_path: Path) -> None:
    onto = tmp_path / "onto.json"
    onto.write_text('{"predicates": [{"name": "A", "cardinality": "several"}]}')
    code, _, err = kg(home, "--ontology", str(onto), "stats")
    assert code == 1 and str(onto) in err and "cardinality" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["as-of", "whenever"], "WHEN: 'whenever' is not a time kg can read; e.g. 2024-03-01"),
        (["facts", "--known-at", "the other day"], "known-at: 'the other day'"),
        (["ingest", "/nonexistent/file.jsonl"], "cannot read /nonexistent/file.jsonl"),
    ],
)
def test_bad_arguments_are_named(home: Path, args: list[str], message: str) -> None:
    code, _, err = kg(home, *args)
    assert code == 1 and message in err


@pytest.mark.parametrize(
    ("args", "env", "setting"),
    [
        ([], {}, "everysec"),
        (["--durability", "always"], {}, "always"),
        ([], {"KG_DURABILITY": "always"}, "always"),
    ],
)
def test_durability_reaches_the_embedded_server(
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    setting: str,
) -> None:
    seen: list[str] = []
    close = FalkorDBStore.close

    async def read_then_close(self: FalkorDBStore) -> None:
        seen.append((await self.client.connection.config_get("appendfsync"))["appendfsync"])
        await close(self)

    monkeypatch.setattr(FalkorDBStore, "close", read_then_close)
    r = runner.invoke(app, ["--home", str(home), *args, "stats"], env=env)
    assert r.exit_code == 0, r.stderr
    assert seen == [setting]


def test_an_unknown_durability_is_refused(home: Path) -> None:
    code, _, err = kg(home, "--durability", "never", "stats")
    assert code == 2 and "never" in err


def test_ingest_queues_with_no_wait_and_still_reads_background(home: Path, jsonl: Path) -> None:
    """`--wait/--no-wait` is HTTP's and MCP's `wait` (issue 24: one name per concept);
    `--background`, its old name, works for one release with a note."""
    code, out, err = kg(home, "ingest", str(jsonl), "--no-wait", "--json")
    assert code == 0, err
    assert {r["status"] for r in json.loads(out)["results"]} == {"queued"}
    code, out, err = kg(home, "ingest", str(jsonl), "--background", "--json")
    assert code == 0 and "--background is deprecated; use --no-wait" in err
    assert {r["status"] for r in json.loads(out)["results"]} == {"duplicate"}
    code, _, err = kg(home, "ingest", str(jsonl), "--no-wait", "--llm-model", "m")
    assert code == 1 and "--no-wait queues the episodes" in err


@pytest.mark.falkordb_only("the lock guards the embedded store's data directory")
def test_a_held_data_directory_is_shared_with_a_note(home: Path, jsonl: Path) -> None:
    """A kg process holding the store (here a Python KG.open) lends its server to a command
    (tests/test_shared_store.py runs this against `kg serve`)."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import asyncio, sys\nfrom kg import KG\n"
            "async def m():\n    kg = await KG.open(home=sys.argv[1])\n"
            "    print('ready', flush=True)\n"
            "    await asyncio.sleep(60)\nasyncio.run(m())",
            str(home),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[1],
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        code, _, err = kg(home, "ingest", str(jsonl))
        assert code == 0, err
        assert f"kg: note: using the store the kg process (pid {holder.pid}) holds" in err
        code, out, _ = kg(home, "facts", "--subject", "Minji", "--json")
        assert code == 0 and [f["object"] for f in json.loads(out)] == ["Busan", "Naver"]
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("uri", ["bolt://127.0.0.1:1", "falkordb://127.0.0.1:1"])
def test_a_missing_server_is_a_clear_error(tmp_path: Path, uri: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "kg.cli", "--uri", uri, "stats"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[1],
    )
    assert r.returncode == 1
    assert "cannot reach" in r.stderr and "127.0.0.1:1" in r.stderr
    assert "Traceback" not in r.stderr


def test_unsupported_uri(home: Path) -> None:
    code, _, err = kg(home, "--uri", "mysql://x", "stats")
    assert code == 1 and "unsupported store URI" in err


def test_demo_runs_offline(backend: Backend, jsonl: Path) -> None:
    """Embedded: in a throwaway directory. With --uri: on that server, in a throwaway group
    erased at the end, leaving the server's other groups as they were."""
    uri = ["--uri", backend.uri] if backend.uri else []
    if uri:
        assert kg(uri, "ingest", str(jsonl))[0] == 0  # a user's group, already there
    r = subprocess.run(
        [sys.executable, "-m", "kg.cli", *uri, "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[1],
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "140", "HOME": "/nonexistent"},
    )
    assert r.returncode == 0, r.stderr
    if uri:
        assert "neo4j at bolt://127.0.0.1" in r.stdout and backend.server.password not in r.stdout  # type: ignore[union-attr]
        assert "(erased at the end)" in r.stdout
        code, out, _ = kg(uri, "facts", "--json")
        assert code == 0 and sorted(f["object"] for f in json.loads(out)) == ["Busan", "Naver"]
        assert json.loads(kg(uri, "stats", "--json")[1])["episodes"] == 2
        server = backend.server
        assert server is not None
        [[groups]] = (
            server.driver()
            .execute_query("MATCH (ep:Episodic) RETURN collect(DISTINCT ep.group_id)")
            .records
        )
        assert groups == ["default"]
    now = r.stdout.split("What is true now")[1].split("The move closed")[0]
    assert "Busan" in now and "Seoul" not in now and "Daegu" not in now
    march = r.stdout.split("What was true in March 2023?")[1].split("Where does")[0]
    assert "Seoul" in march and "Busan" not in march
    assert "contested" in r.stdout
    after = r.stdout.split("After the rollback")[1]
    assert "Busan" in after and "Naver" in after
    assert "Pyongyang" not in after and "Evil Corp" not in after


def _commands(group: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    """Every subcommand under a (Typer's own) click group, with its path."""
    for name, sub in getattr(group, "commands", {}).items():
        yield [*path, name], sub
        yield from _commands(sub, [*path, name])


def test_help_paragraphs_wrap_to_the_terminal() -> None:
    """A docstring's paragraph is one paragraph on screen: wrapped to the terminal's width,
    never at the line breaks of the source (which left half-empty lines at 60 columns and
    ragged ones at 120)."""
    import inspect

    import typer.main

    root = typer.main.get_command(app)
    checked = 0
    for path, command in [([], root), *_commands(root, [])]:
        wide = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "2000"})
        assert wide.exit_code == 0, (path, wide.output)
        text = " ".join(wide.stdout.split()).replace("- ", "-")  # wrapped after a hyphen
        for paragraph in inspect.cleandoc(command.help or "").split("\n\n"):
            flat = " ".join(paragraph.split()).replace("- ", "-")
            assert flat in text, (path, flat, wide.stdout)
            checked += 1
        # CliRunner forces click's help to 80 columns; within them nothing is cut.
        narrow = runner.invoke(app, [*path, "--help"])
        assert max(map(len, narrow.stdout.splitlines())) <= 80, (path, narrow.stdout)
        assert "…" not in narrow.stdout and "<bool>" not in narrow.stdout, narrow.stdout
    assert checked > 30
    # A real terminal's width is the help's; at 80 columns every recipe name is whole (rich's
    # help cut them with '…').
    for path, columns in (([], 60), (["rollback"], 60), (["search"], 60), (["search"], 80)):
        env = {**os.environ, "COLUMNS": str(columns)}
        r = subprocess.run(
            [sys.executable, "-m", "kg.cli", *path, "--help"],
            text=True,
            capture_output=True,
            env=env,
        )
        assert max(map(len, r.stdout.splitlines())) <= columns, (path, r.stdout)
        if columns == 80:
            assert all(name in r.stdout for name in RECIPES), r.stdout


def test_help_lists_every_command() -> None:
    r = runner.invoke(app, ["--help"])
    for command in (
        "ingest",
        "facts",
        "as-of",
        "history",
        "stats",
        "rollback",
        "why",
        "log",
        "erase",
        "search",
        "demo",
        "groups",
        "communities",
    ):
        assert command in r.stdout


def test_communities_build_and_list(where: list[str], jsonl: Path) -> None:
    code, stdout, _ = kg(where, "communities", "list")
    assert code == 0 and "no communities" in stdout
    assert kg(where, "ingest", str(jsonl))[0] == 0
    code, stdout, _ = kg(where, "communities", "build")
    assert code == 0 and "1 communities: 1 summarised, 0 unchanged" in stdout
    code, stdout, _ = kg(where, "communities", "build")
    assert "0 summarised, 1 unchanged" in stdout
    code, stdout, _ = kg(where, "communities", "list", "--json")
    [c] = json.loads(stdout)
    assert len(c["members"]) == 3 and "Minji lives in Busan" in c["summary"]
    code, _, stderr = kg(where, "communities", "build", "--max-iterations", "0")
    assert code != 0 and "max-iterations" in stderr


def test_rollback_dry_run_then_apply(where: list[str], jsonl: Path) -> None:
    kg(where, "ingest", str(jsonl))
    _, out, _ = kg(where, "facts", "--predicate", "LIVES_IN", "--json")
    move = json.loads(out)[0]["episode_id"]  # the episode that moved Minji to Busan

    _, out, _ = kg(where, "log", "--json")
    assert [(e["kind"], e["episodes"]) for e in json.loads(out)] == [("closure", [move])]
    _, out, _ = kg(where, "log", "--no-closures")
    assert "audit log: empty" in out

    code, out, _ = kg(where, "rollback", move)
    assert code == 0
    assert "would roll back 1 episode" in out and "dry run: nothing changed" in out
    assert "Busan" in out and "Seoul" in out
    _, now, _ = kg(where, "facts", "--predicate", "LIVES_IN", "--json")
    assert [r["object"] for r in json.loads(now)] == ["Busan"]

    code, out, _ = kg(where, "rollback", move, "--apply")
    assert code == 0 and "rolled back 1 episode" in out
    _, now, _ = kg(where, "facts", "--predicate", "LIVES_IN", "--json")
    assert [r["object"] for r in json.loads(now)] == ["Seoul"]  # re-opened

    code, out, _ = kg(where, "rollback", move, "--apply")
    assert code == 0 and "nothing to roll back (already rolled back" in out
    code, out, _ = kg(where, "log", "--json")
    # The closure the move caused went with it; the rollback itself is on record.
    assert [e["kind"] for e in json.loads(out)] == ["rollback"]


def test_rollback_by_source_and_argument_errors(where: list[str], tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text(
        "\n".join(
            [
                episode("2020-01-01T00:00:00Z", ("A", "LIVES_IN", "X")),
                episode(
                    "2021-01-01T00:00:00Z", ("A", "LIVES_IN", "Y"), source_description="web:evil"
                ),
            ]
        )
    )
    kg(where, "ingest", str(path))
    code, out, _ = kg(where, "rollback", "--source-description", "web:evil", "--apply")
    assert code == 0 and "rolled back 1 episode" in out
    _, now, _ = kg(where, "facts", "--json")
    assert [r["object"] for r in json.loads(now)] == ["X"]
    cases = [
        (["rollback"], "give episode ids or --source-description"),
        (["rollback", "x", "--since", "2020-01-01"], "--since goes with"),
        (["rollback", "no-such-episode"], "no episode 'no-such-episode'"),
    ]
    for args, message in cases:
        code, _, err = kg(where, *args)
        assert code == 1 and message in err, args


def test_why_shows_versions_and_episodes(where: list[str], jsonl: Path) -> None:
    kg(where, "ingest", str(jsonl))
    _, out, _ = kg(where, "history", "--predicate", "LIVES_IN", "--json")
    seoul = json.loads(out)[0]["id"]
    code, out, _ = kg(where, "why", seoul, "--json")
    assert code == 0
    data = json.loads(out)
    assert [v["object"] for v in data["versions"]] == ["Seoul", "Seoul"]
    assert len(data["episodes"]) == 2
    code, _, err = kg(where, "why", "missing")
    assert code == 1 and "no fact" in err


def test_erase_needs_confirmation_and_a_target(where: list[str], jsonl: Path) -> None:
    kg(where, "ingest", str(jsonl))
    code, _, err = kg(where, "erase", "--subject", "Minji", input="n\n")
    assert code == 1 and "nothing erased" in err
    code, _, err = kg(where, "erase")
    assert code == 1 and "--subject NAME or --whole-group" in err
    code, out, _ = kg(where, "erase", "--subject", "Minji", "--dry-run", "--json")  # asks nothing
    assert code == 0 and json.loads(out)["episodes_deleted"] == 2
    code, out, err = kg(where, "erase", "--entity", "Minji", "--dry-run")  # the old name
    assert code == 0 and "would erase entity 'Minji': 2 episodes" in out
    assert "dry run: nothing erased" in out
    assert err == "kg: note: --entity is deprecated; use --subject\n"
    code, out, _ = kg(where, "erase", "--subject", "Minji", "--yes")
    assert code == 0 and "erased entity 'Minji': 2 episodes" in out
    _, out, _ = kg(where, "stats", "--json")
    assert json.loads(out)["episodes"] == 0
    code, out, _ = kg(where, "erase", "--whole-group", "--yes")
    assert code == 0 and "erased the whole group" in out


def test_replay_command(where: list[str], jsonl: Path, tmp_path: Path) -> None:
    kg(where, "ingest", str(jsonl))
    code, out, _ = kg(where, "replay")
    assert code == 0 and "the live graph equals its replay" in out
    onto = tmp_path / "onto.json"
    onto.write_text(json.dumps({"predicates": [{"name": "LIVES_IN", "cardinality": "many"}]}))
    code, out, _ = kg(where, "--ontology", str(onto), "replay")
    assert code == 0 and "only in the replay: Minji LIVES_IN Seoul" in out and "dry run" in out
    code, out, _ = kg(where, "--ontology", str(onto), "replay", "--apply")
    assert code == 0 and "applied" in out


def test_search_with_explain_history_and_context(where: list[str], jsonl: Path) -> None:
    assert kg(where, "ingest", str(jsonl))[0] == 0
    code, out, _ = kg(
        where,
        "--embedder",
        "minilm",
        "search",
        "where does Minji live",
        "--explain",
        "--include-closed",
        "--recipe",
        "facts_hybrid_bfs_rrf",
    )
    assert code == 0, out
    assert "branches" in out and "bm25" in out and "cosine" in out and "bfs" in out
    assert "(closed)" in out and "bm25 #1" in out  # rich wraps the long cells at 80 columns
    code, out, _ = kg(where, "search", "where does Minji live", "--include-closed", "--json")
    hits = [h for h in json.loads(out)["hits"] if h["kind"] == "fact"]
    closed = {h["text"]: h["status"] == "closed" for h in hits}
    assert closed["Minji lives in Seoul"] is True and closed["Minji lives in Busan"] is False
    code, out, _ = kg(where, "search", "Minji lives", "--valid-at", "2023-01-01", "--json")
    facts = [h["text"] for h in json.loads(out)["hits"] if h["kind"] == "fact"]
    assert "Minji lives in Seoul" in facts and "Minji lives in Busan" not in facts
    # Without an embedder the cosine branch says why it found nothing; the others still run.
    cosine = [b for b in json.loads(out)["branches"] if b["method"] == "cosine"]
    assert "no embedder" in cosine[0]["error"]
    code, out, _ = kg(where, "search", "Minji", "--context", "--max-tokens", "200")
    assert code == 0 and out.startswith("Memory records") and '"Minji lives in Busan"' in out
    code, _, err = kg(where, "search", "Minji", "--recipe", "nope")
    assert code == 1 and "unknown recipe 'nope'" in err
    code, out, _ = kg(where, "search", "Minji", "--min-score", "5")
    assert code == 0 and "no results" in out
    code, out, _ = kg(
        where,
        "--embedder",
        "minilm",
        "search",
        "boiling point of mercury",
        "--abstain-below",
        "0.49",
    )
    assert code == 0 and "facts: abstained: best cosine similarity" in out and "< 0.49" in out
    assert "no results" in out


class _ChatServer:
    """A local OpenAI-compatible endpoint: answers /v1/chat/completions with an extraction
    that quotes the episode's first line, so the CLI's real LLM path runs end to end."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.requests: list[dict[str, object]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                episode = body["messages"][-1]["content"].split("EPISODE:\n", 1)[1]
                speaker, _, text = episode.splitlines()[0].partition(": ")
                city = text.rstrip(".").split()[-1]
                content = json.dumps(
                    {
                        "entities": [],
                        "facts": [
                            {
                                "subject": "I",
                                "predicate": "LIVES_IN",
                                "object": city,
                                "fact": f"{speaker} lives in {city}",
                                "quote": text,
                            }
                        ],
                    }
                )
                reply = json.dumps(
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": content},
                            }
                        ],
                        "usage": {
                            "prompt_tokens": 100,
                            "completion_tokens": 20,
                            "total_tokens": 120,
                        },
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def test_ingest_text_episodes_through_an_llm_endpoint(where: list[str], tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    lines = [
        {
            "source": "message",
            "content": "Minji: I live in Seoul.",
            "group_id": "a",
            "reference_time": "2021-01-01T00:00:00Z",
        },
        {
            "source": "message",
            "content": "Minji: I moved to Busan.",
            "group_id": "a",
            "reference_time": "2024-06-01T00:00:00Z",
        },
        {
            "source": "message",
            "content": "Jun: I live in Daegu.",
            "group_id": "b",
            "reference_time": "2022-01-01T00:00:00Z",
        },
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines))
    code, _, err = kg(where, "ingest", str(path))
    assert code == 1 and "need an LLM (--llm-model" in err  # nothing written
    server = _ChatServer()
    try:
        code, out, _ = kg(
            where,
            "ingest",
            str(path),
            "--llm-model",
            "local-model",
            "--llm-base-url",
            server.url,
            "--concurrency",
            "2",
        )
    finally:
        server.close()
    assert code == 0, out
    assert "ingested 3 episodes" in out and "1 closed" in out and "3 LLM calls" in out
    assert {r["model"] for r in server.requests} == {"local-model"}
    assert server.requests[0]["response_format"]["type"] == "json_schema"  # type: ignore[index]
    code, out, _ = kg(where, "--group", "a", "facts", "--json")
    assert [r["object"] for r in json.loads(out)] == ["Busan"]
    code, out, _ = kg(where, "--group", "b", "facts", "--json")
    assert [r["object"] for r in json.loads(out)] == ["Daegu"]


def test_ingest_text_unextracted_then_search_it(where: list[str], tmp_path: Path) -> None:
    path = tmp_path / "notes.jsonl"
    path.write_text(
        json.dumps(
            {
                "source": "text",
                "content": "민지는 부산으로 이사했어요",
                "reference_time": "2024-06-01T00:00:00Z",
            }
        )
    )
    code, out, _ = kg(where, "ingest", str(path), "--no-extract")
    assert code == 0 and "ingested 1 episodes" in out
    code, out, _ = kg(where, "search", "부산에", "--recipe", "episodes_bm25", "--json")
    assert [h["text"] for h in json.loads(out)["hits"] if h["kind"] == "episode"] == [
        "민지는 부산으로 이사했어요"
    ]
    code, _, err = kg(where, "ingest", str(path), "--no-extract", "--llm-model", "m")
    assert code == 1 and "not both" in err


def test_search_context_is_counted_as_a_context(where: list[str], jsonl: Path) -> None:
    assert kg(where, "ingest", str(jsonl))[0] == 0
    code, out, _ = kg(where, "search", "Minji", "--context", "--max-tokens", "200")
    assert code == 0 and out.startswith("Memory records")
    _, out, _ = kg(where, "stats", "--json")
    queries = json.loads(out)["queries"]
    assert queries["queries"] == 1 and queries["contexts"] == 1
    assert queries["context_tokens"] >= 200 // 4  # the block's size, counted by KG.context


def test_history_and_why_tables_fit_80_columns_with_whole_ids(
    where: list[str], jsonl: Path
) -> None:
    kg(where, "ingest", str(jsonl))
    _, out, _ = kg(where, "history", "--json")
    rows = json.loads(out)
    code, table, _ = kg(where, "history")
    assert code == 0 and max(map(len, table.splitlines())) <= 80, table
    for r in rows:
        assert r["id"][:8] in table  # whole, never folded or cut with '…'
    closed = next(r for r in rows if r["closed_by_episode_id"])
    code, table, _ = kg(where, "why", closed["id"][:8])
    assert code == 0 and max(map(len, table.splitlines())) <= 80, table
    assert closed["id"][:8] in table and closed["closed_by_episode_id"][:8] in table
    assert "…" not in table
