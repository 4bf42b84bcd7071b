"""Every time input of the Python API and the CLI is read by the one parser (issue 24 item 2):
dates, years, year-months and time words are accepted, and `reference_time` defaults to now."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kg import KG
from kg.cli import app
from kg.errors import InputError
from tests.conftest import add, t


async def test_python_reads_string_times(mem: KG) -> None:
    await add(mem, t(2020), ("Alice", "LIVES_IN", "Paris"))
    await add(mem, t(2022), ("Alice", "LIVES_IN", "Berlin"))
    assert [f.object for f in await mem.facts(valid_at="2021-01-01")] == ["Paris"]
    assert [f.object for f in await mem.facts(valid_at="2021")] == ["Paris"]
    assert [f.object for f in await mem.facts(valid_at="March 2023")] == ["Berlin"]
    with pytest.raises(InputError, match="valid_at: 'someday' is not a time"):
        await mem.facts(valid_at="someday")


async def test_reference_time_defaults_to_now(mem: KG) -> None:
    before = datetime.now(UTC)
    row = {"subject": "Bob", "predicate": "LIVES_IN", "object": "Rome", "valid_at": "2019"}
    r = await mem.add_episode(source="facts", facts=[row])
    (ep,) = await mem.store.episodes("default", [r.episode_uuid])
    assert ep.valid_at >= before
    (fact,) = await mem.facts(subject="Bob")
    assert fact.edge.valid_at == t(2019)
    r = await mem.add_episode(
        source="facts",
        reference_time="2018-05-01",
        facts=[{"subject": "Eve", "predicate": "LIVES_IN", "object": "Oslo"}],
    )
    (ep,) = await mem.store.episodes("default", [r.episode_uuid])
    assert ep.valid_at == t(2018, 5, 1)


def test_cli_as_of_words_and_date_only_ingest_files(home: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    path = tmp_path / "e.jsonl"
    year = datetime.now(UTC).year
    rows = [
        {
            "source": "facts",
            "reference_time": "2020-01-01",
            "facts": [{"subject": "Minji", "predicate": "LIVES_IN", "object": "Busan"}],
        },
        {
            "source": "facts",
            "reference_time": f"{year}-01-01",
            "facts": [{"subject": "Minji", "predicate": "LIVES_IN", "object": "Seoul"}],
        },
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    r = runner.invoke(app, ["--home", str(home), "ingest", str(path)])
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, ["--home", str(home), "as-of", "last year", "--json"])
    assert r.exit_code == 0, r.stderr
    assert [f["object"] for f in json.loads(r.stdout)] == ["Busan"]
    r = runner.invoke(app, ["--home", str(home), "facts", "--valid-at", "2021", "--json"])
    assert [f["object"] for f in json.loads(r.stdout)] == ["Busan"]
