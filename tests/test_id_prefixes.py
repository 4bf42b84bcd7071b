"""Ids are accepted by any unique prefix of 6 or more characters (issue 24 item 3): the
tables show 8, and `kg why 428e0271` / `kg rollback c7a44e30` must take what they show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kg import KG
from kg.cli import app
from kg.errors import InputError, NotFoundError
from tests.conftest import Backend, add, t


async def test_store_finds_ids_by_prefix_within_the_group(kg: KG) -> None:
    first = await add(kg, t(2020), ("Alice", "LIVES_IN", "Paris"))
    second = await add(kg, t(2022), ("Alice", "LIVES_IN", "Berlin"))
    other = await add(kg, t(2021), ("Bob", "LIVES_IN", "Rome"), group_id="other")
    eps = sorted([first.episode_uuid, second.episode_uuid])
    assert await kg.store.ids_by_prefix("default", "episode", "", 10) == eps
    for ep in eps:
        assert await kg.store.ids_by_prefix("default", "episode", ep[:8], 10) == [ep]
    assert await kg.store.ids_by_prefix("default", "episode", other.episode_uuid, 10) == []
    versions = await kg.history(subject="Alice")
    paris = [v for v in versions if v.object == "Paris"]
    assert len(paris) == 2  # the first version and its closed copy
    for v in paris:  # any version's uuid names the fact
        found = await kg.store.ids_by_prefix("default", "fact", v.edge.uuid[:7], 10)
        assert found == [v.edge.fact_uuid]
    assert await kg.store.ids_by_prefix("default", "episode", "zzzzzz", 10) == []


async def test_why_and_rollback_take_a_prefix(kg: KG) -> None:
    first = await add(kg, t(2020), ("Alice", "LIVES_IN", "Paris"))
    (fact,) = await kg.facts(subject="Alice")
    x = await kg.why(fact.edge.uuid[:8])
    assert [v.edge.uuid for v in x.versions] == [fact.edge.uuid]
    report = await kg.rollback(first.episode_uuid[:6])
    assert report.episodes == [first.episode_uuid]
    with pytest.raises(NotFoundError):
        await kg.why("0000000000")


async def test_an_ambiguous_prefix_lists_the_candidates(
    falkor_kg: KG, monkeypatch: pytest.MonkeyPatch
) -> None:
    await add(falkor_kg, t(2020), ("Alice", "LIVES_IN", "Paris"))
    many = [f"abcdef{i:02d}-0000" for i in range(11)]

    async def shared(group_id: str, kind: str, prefix: str, limit: int) -> list[str]:
        return many[:limit]

    monkeypatch.setattr(falkor_kg.store, "ids_by_prefix", shared)
    with pytest.raises(InputError, match="episode id 'abcdef' is ambiguous") as info:
        await falkor_kg.rollback("abcdef")
    assert "abcdef00-0000" in str(info.value) and "abcdef09-0000" in str(info.value)
    assert "abcdef10-0000" not in str(info.value) and str(info.value).endswith("characters")


def test_cli_takes_the_ids_its_tables_show(backend: Backend, home: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    where = backend.cli_args(home)
    path = tmp_path / "e.jsonl"
    path.write_text(
        '{"source": "facts", "reference_time": "2020-01-01", "facts": '
        '[{"subject": "A", "predicate": "LIVES_IN", "object": "B"}]}'
    )
    assert runner.invoke(app, [*where, "ingest", str(path)]).exit_code == 0
    r = runner.invoke(app, [*where, "history", "--json"])
    row = json.loads(r.stdout)[0]
    r = runner.invoke(app, [*where, "why", row["id"][:8]])
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, [*where, "rollback", row["episode_id"][:8]])
    assert r.exit_code == 0, r.stderr
