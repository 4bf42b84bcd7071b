"""The default search finds text stored without extraction (issue 24 item 5): where kg has
no LLM, text can only be stored unextracted, so the default also searches the episodes."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kg import KG
from kg.cli import app
from tests.conftest import Backend, add, t


async def test_python_default_search_finds_unextracted_text(falkor_kg: KG) -> None:
    await add(falkor_kg, t(2020), ("Alice", "LIVES_IN", "Paris"))
    kettle = "The blue kettle is in the attic"
    await falkor_kg.add_episode(
        source="text", reference_time=t(2021), content=kettle, extract=False
    )
    results = await falkor_kg.search("where is the kettle")
    assert [h.episode.content for h in results.episodes] == [kettle]
    assert (await falkor_kg.search("Alice Paris")).facts  # facts as before
    # a recipe named is the recipe run
    assert not (await falkor_kg.search("kettle", recipe="facts_hybrid")).episodes
    assert "kettle" in await falkor_kg.context("where is the kettle")


def test_cli_default_search_finds_unextracted_text(
    backend: Backend, home: Path, tmp_path: Path
) -> None:
    runner = CliRunner()
    where = backend.cli_args(home)
    path = tmp_path / "notes.jsonl"
    path.write_text(json.dumps({"source": "text", "content": "The blue kettle is in the attic"}))
    r = runner.invoke(app, [*where, "ingest", str(path), "--no-extract"])
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, [*where, "search", "where is the kettle", "--json"])
    assert r.exit_code == 0, r.stderr
    assert [h["text"] for h in json.loads(r.stdout)["hits"]] == ["The blue kettle is in the attic"]
    r = runner.invoke(
        app, [*where, "--embedder", "none", "search", "kettle", "--explain"], env={"COLUMNS": "300"}
    )
    assert "no embedder configured (give --embedder minilm" in r.stdout
    assert "KG.open" not in r.stdout
