"""Export and import between stores: the whole bi-temporal graph travels, and a bad file
never leaves a half-imported group behind."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kg import KG
from kg.cli import app
from kg.errors import InputError
from kg.ingest.embeddings import local_minilm
from kg.schemas.embedder import Embedder
from kg.schemas.store import is_staging
from kg.store.falkordb import FalkorDBStore
from kg.store.neo4j import Neo4jStore, fulltext
from kg.transfer import import_lines
from tests.conftest import ROUTES, Backend, add, open_test_kg, t
from tests.test_neo4j_offline import FakeDriver, parse


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    return local_minilm()


async def build(kg: KG) -> str:
    await add(kg, t(2021, 3, 2), ("Minji", "LIVES_IN", "Seoul"), ("Minji", "WORKS_AT", "Naver"))
    poison = await add(kg, t(2023, 1, 1), ("Minji", "LIVES_IN", "Jeju"), source_description="web")
    await kg.rollback(poison.episode_uuid, dry_run=False)
    await add(kg, t(2024, 6, 1), ("Minji", "LIVES_IN", "Busan"), ("Jisoo", "KNOWS", "Minji"))
    await kg.add_episode(
        source="text", content="부산으로 이사했어요", reference_time=t(2024, 6, 2), extract=False
    )
    await kg.build_communities()
    return poison.episode_uuid


async def lines_of(kg: KG, group: str = "default") -> list[str]:
    return [line async for line in kg.export_lines(group)]


async def snapshot(kg: KG, group: str = "default") -> dict[str, object]:
    history = await kg.history(group_id=group, limit=1000)
    return {
        "history": sorted(
            (
                v.edge.uuid,
                v.subject,
                v.predicate,
                v.object,
                v.edge.valid_at,
                v.edge.invalid_at,
                v.edge.expired_at,
            )
            for v in history
        ),
        "march_2023": sorted(f.object for f in await kg.facts(group_id=group, valid_at=t(2023, 3))),
        "stats": (await kg.stats(group)).model_dump(exclude={"group_id"}),
        "communities": sorted(
            (c.node.uuid, c.node.summary, tuple(c.members)) for c in await kg.communities(group)
        ),
    }


@pytest.mark.parametrize("route", ROUTES)
async def test_a_group_moves_to_another_store_whole(
    route: str, backend_named: Callable[[str], Backend], tmp_path: Path, minilm: Embedder
) -> None:
    source, destination = map(backend_named, route.split("->"))
    async with await open_test_kg(source, tmp_path / "a", embedder=minilm) as a:
        poison = await build(a)
        lines = await lines_of(a)
        before = await snapshot(a)
    header, trailer = json.loads(lines[0]), json.loads(lines[-1])
    assert '"content_embedding"' in "".join(lines)
    assert header["format"] == "kg-export/1" and trailer["counts"]["edges"] >= 4
    assert header["backend"] == source.name
    async with await open_test_kg(destination, tmp_path / "b", embedder=minilm) as b:
        report = await b.import_lines(lines)
        assert report.counts == trailer["counts"] and report.embedding_dim == 384
        assert await snapshot(b) == before
        # Everything works on the copy: cosine search, Korean BM25, why, rollback, replay.
        hits = await b.search("where does Minji live now", recipe="facts_cosine")
        assert hits.facts[0].fact.object == "Busan"
        episodes = await b.search("부산에", recipe="episodes_bm25")
        assert episodes.episodes
        why = await b.why(hits.facts[0].fact.edge.uuid)
        assert why.episodes
        assert (await b.rollback(poison)).already_rolled_back == [poison]
        assert (await b.replay()).identical


async def test_import_into_a_new_group_of_the_same_store(
    kg: KG, monkeypatch: pytest.MonkeyPatch
) -> None:
    await build(kg)
    full = await lines_of(kg)
    monkeypatch.setattr("kg.transfer.PAGE", 2)  # many pages: keyset paging loses nothing
    lines = await lines_of(kg)
    assert sorted(lines[1:]) == sorted(full[1:])
    before = await snapshot(kg)
    await kg.import_lines(lines, into="copy")
    after = await snapshot(kg, "copy")
    assert after["march_2023"] == before["march_2023"] and after["stats"] == before["stats"]
    with pytest.raises(InputError, match="already exists"):
        await kg.import_lines(lines, into="copy")
    with pytest.raises(InputError, match="already exists"):
        await kg.import_lines(lines)  # 'default' is there


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda ls: ls[:-1], "truncated"),
        (lambda ls: ls[:-3] + ls[-2:], "disagree"),
        (lambda ls: [*ls[:5], "{not json", *ls[5:]], "malformed JSON"),
        (lambda ls: [*ls[:5], '{"record": "edges", "uuid": 1}', *ls[5:]], "Field required"),
        (lambda ls: [ls[0], *reversed(ls[1:-1]), ls[-1]], "out of order"),
        (lambda ls: ls[1:], "no header"),
        (lambda ls: [*ls, ls[3]], "after the end"),
    ],
)
async def test_a_damaged_file_leaves_nothing_behind(kg: KG, damage, message: str) -> None:  # type: ignore[no-untyped-def]
    await build(kg)
    lines = damage(await lines_of(kg))
    with pytest.raises(InputError, match=message):
        await kg.import_lines(lines, into="copy")
    assert "copy" not in await kg.groups()
    assert (await kg.stats()).current_facts > 0  # the source is untouched


class EightDims:
    dim = 8

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] * 8 for _ in texts]


async def test_embeddings_of_another_dimension_are_refused(
    backend: Backend, tmp_path: Path, minilm: Embedder
) -> None:
    async with await open_test_kg(backend, tmp_path / "a", embedder=minilm) as a:
        await build(a)
        lines = await lines_of(a)
    if backend.server is not None:
        backend.server.empty()  # the 384-dimension vector indexes go: b makes 8-dimension ones
    async with await open_test_kg(backend, tmp_path / "b", embedder=EightDims()) as b:  # type: ignore[arg-type]
        with pytest.raises(InputError, match="384 dimensions, the store's vector indexes 8"):
            await b.import_lines(lines)
        assert await b.groups() == []


async def test_export_without_embeddings_and_of_a_missing_group(kg: KG) -> None:
    await build(kg)
    lines = [line async for line in kg.export_lines(embeddings=False)]
    assert lines and not any('_embedding"' in line for line in lines)
    with pytest.raises(InputError, match="no group 'ghost'"):
        _ = [line async for line in kg.export_lines("ghost")]


@pytest.mark.parametrize("route", ROUTES)
def test_cli_export_then_import(
    route: str, backend_named: Callable[[str], Backend], tmp_path: Path
) -> None:
    runner = CliRunner()
    source, destination = map(backend_named, route.split("->"))
    src, dst = source.cli_args(tmp_path / "src"), destination.cli_args(tmp_path / "dst")
    dump = tmp_path / "dump.jsonl"
    path = tmp_path / "e.jsonl"
    path.write_text(
        json.dumps(
            {
                "source": "facts",
                "reference_time": "2024-01-01T00:00:00Z",
                "facts": [{"subject": "A", "predicate": "KNOWS", "object": "B"}],
            }
        )
    )
    assert runner.invoke(app, [*src, "ingest", str(path)]).exit_code == 0
    r = runner.invoke(app, [*src, "export", "-o", str(dump)])
    assert r.exit_code == 0 and dump.exists() and not dump.with_name("dump.jsonl.part").exists()
    again = runner.invoke(app, [*src, "export", "-o", str(dump)])
    assert again.exit_code == 1 and "not overwriting" in again.stderr
    r = runner.invoke(app, [*dst, "import", str(dump), "--into", "team"])
    assert r.exit_code == 0 and "imported into group team" in r.stdout
    r = runner.invoke(app, [*dst, "--group", "team", "facts", "--json"])
    assert json.loads(r.stdout)[0]["object"] == "B"
    r = runner.invoke(app, [*dst, "import", str(tmp_path / "nope.jsonl")])
    assert r.exit_code == 1 and "cannot read" in r.stderr


# -- interrupted imports, and tenancy ----------------------------------------------------------


async def big_export(tmp_path: Path) -> Path:
    """One episode of 700 facts: 1,400 entities and 700 edges, several load batches."""
    async with await KG.open(home=tmp_path / "src") as kg:
        await add(kg, t(2024), *[(f"P{i}", "KNOWS", f"Q{i}") for i in range(700)])
        path = tmp_path / "big.jsonl"
        path.write_text("\n".join(await lines_of(kg)) + "\n")
    return path


def _import_until_killed(home: Path, dump: Path) -> str:
    """A kg process that imports, and stops for good after its second load batch."""
    return textwrap.dedent(f"""
        import asyncio
        from kg import KG

        async def main():
            kg = await KG.open(home={str(home)!r})
            store = kg.store
            name = "load_staged" if hasattr(store, "load_staged") else "load"
            real, calls = getattr(store, name), []

            async def load_then_stop(*args):
                await real(*args)
                calls.append(1)
                if len(calls) == 2:
                    while (await store.client.connection.info("persistence"))[
                            "aof_buffer_length"]:
                        await asyncio.sleep(0.01)
                    print(store.server.pid, flush=True)
                    await asyncio.sleep(3600)

            setattr(store, name, load_then_stop)
            with open({str(dump)!r}) as fh:
                await kg.import_lines(fh, into="team")

        asyncio.run(main())
    """)


async def test_an_imported_group_reopens_whole(tmp_path: Path) -> None:
    """On loading an RDB, FalkorDB 4.16 leaves out of its edge indexes every edge whose
    source is node 0; an import's first node was an entity, so once the store reopened that
    entity's facts were gone from why, history and export. A cycle makes every entity a
    source, whichever the import writes first."""
    async with await KG.open(home=tmp_path / "src") as src:
        await add(src, t(2024), ("Ann", "KNOWS", "Bo"), ("Bo", "KNOWS", "Ann"))
        lines = await lines_of(src)
    async with await KG.open(home=tmp_path / "dst") as kg:
        await kg.import_lines(lines, into="team")
        assert await kg.store.fold_history(wait=True)  # the base is an RDB from here on
    async with await KG.open(home=tmp_path / "dst") as kg:  # reopened: loaded from the RDB
        history = await kg.history(group_id="team", limit=100)
        assert sorted(f.subject for f in history) == ["Ann", "Bo"]
        for fact in history:
            assert (await kg.why(fact.edge.uuid, group_id="team")).versions
        kinds = [json.loads(x).get("record") for x in await lines_of(kg, "team")]
        assert kinds.count("edges") == 2
        await add(kg, t(2025), ("Ann", "KNOWS", "Cy"), group_id="team")  # writable after it
        assert len(await kg.history(group_id="team", subject="Ann", limit=100)) == 2


async def test_a_killed_import_leaves_no_group_and_can_be_run_again(tmp_path: Path) -> None:
    dump, home = await big_export(tmp_path), tmp_path / "dst"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _import_until_killed(home, dump),
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[1],
    )
    assert proc.stdout is not None
    server = int(await asyncio.wait_for(proc.stdout.readline(), 120))
    os.kill(server, signal.SIGKILL)
    proc.kill()
    await proc.wait()

    async with await KG.open(home=home) as kg:
        assert await kg.groups() == []  # 1,000 entities were loaded, but not as a group
        with dump.open() as fh:
            report = await kg.import_lines(fh, into="team")
        assert report.counts["entities"] == 1400 and report.counts["edges"] == 700
        assert (await kg.stats("team")).current_facts == 700
        assert await kg.groups() == ["team"]
        assert await kg.store.staged("team") == []  # the killed import's leftovers are gone


async def test_a_damaged_import_does_not_come_back_after_restarts(tmp_path: Path) -> None:
    """FalkorDB logs a constraint again when a replay brings it into force, after the graph
    was deleted: the next replay then created an empty graph, and the retry was refused."""
    home = tmp_path / "dst"
    async with await KG.open(home=tmp_path / "src") as src:
        await build(src)
        lines = await lines_of(src)
    kg = await KG.open(home=home)
    with pytest.raises(InputError, match="truncated"):
        await kg.import_lines(lines[:-1], into="team")
    assert isinstance(kg.store, FalkorDBStore) and kg.store.server is not None
    os.kill(kg.store.server.pid or 0, signal.SIGKILL)  # a crash: nothing folded on close
    kg.store.server.process.wait()  # type: ignore[union-attr]
    await kg.close()
    for _ in range(2):
        async with await KG.open(home=home) as kg:
            assert await kg.groups() == []
    async with await KG.open(home=home) as kg:
        report = await kg.import_lines(lines, into="team")
        assert report.counts["edges"] > 0 and await kg.groups() == ["team"]


def _retarget(lines: list[str], header_group: str, row_group: str) -> list[str]:
    out = []
    for line in lines:
        row = json.loads(line)
        if row["record"] == "header":
            row["group_id"] = header_group
        elif "group_id" in row:
            row["group_id"] = row_group
        out.append(json.dumps(row, ensure_ascii=False))
    return out


async def test_every_imported_row_takes_the_target_group(falkor_kg: KG) -> None:
    """Rows naming another tenant, in a file whose header names the target: stored under the
    target, whatever the rows said (FalkorDB: every node and edge inspected; Neo4j's rows are
    checked offline below)."""
    kg = falkor_kg
    await build(kg)
    lines = _retarget(await lines_of(kg), header_group="team8", row_group="other-tenant")
    await kg.import_lines(lines)  # into the header's group
    assert isinstance(kg.store, FalkorDBStore)
    for query in (
        "MATCH (n) RETURN DISTINCT n.group_id AS g",
        "MATCH ()-[e]->() RETURN DISTINCT e.group_id AS g",
    ):
        assert [r["g"] for r in await kg.store.raw_query("team8", query)] == ["team8"]
    assert sorted(await kg.groups()) == ["default", "team8"]
    assert await snapshot(kg, "team8") == await snapshot(kg)


async def test_a_neo4j_import_writes_nothing_under_another_groups_id(falkor_kg: KG) -> None:
    """Offline: every row and parameter the Neo4j backend is sent carries the staging id,
    and one last transaction renames it to the target; the file's tenant never appears.
    (The export comes from the embedded store: the Neo4j side is a fake driver.)"""
    kg = falkor_kg
    await build(kg)
    lines = _retarget(await lines_of(kg), header_group="team8", row_group="other-tenant")
    driver = FakeDriver()
    store = Neo4jStore(driver, "neo4j", embedding_dim=384)
    await import_lines(store, lines)
    *loads, publish = [tx for tx in driver.transactions if not tx[0][0].startswith("CREATE")]
    assert len(loads) >= 7  # one per record kind at least
    sent = json.dumps([p for tx in loads for _, p in tx], default=str)
    staging = {g for g in re.findall(r'"group_id": "([^"]+)"', sent)}
    assert len(staging) == 1 and is_staging(staging.pop(), "team8")
    assert "other-tenant" not in sent
    renames = [p for _, p in publish]
    key = fulltext.group_key("team8")  # published under the target's full-text key too
    assert renames == [{"staging": renames[0]["staging"], "group_id": "team8", "key": key}] * 2
    await store.staged("team8")
    for query, _ in [*(st for tx in [*loads, publish] for st in tx), *driver.reads]:
        # Not the schema check's admin command (not openCypher), nor a write's one query of
        # CALL {} subqueries (the grammar has none; test_neo4j_offline parses every load
        # statement alone, and the live tests run them so). DDL's shape: test_neo4j_offline.
        if not query.startswith("SHOW ") and "CALL {" not in query:
            parse(query)


def _dumped_row(store: FalkorDBStore | Neo4jStore, model: Any, drop: tuple[str, ...]) -> Any:
    """A model's row as `_encode` made it from `model_dump` (before it read fields directly)."""
    from kg.schemas.graph import VECTOR_FIELDS
    from kg.store.cypher.base import TIME_LIST_FIELDS

    row = {}
    for key, value in model.model_dump(mode="python").items():
        if key in drop or key in VECTOR_FIELDS or value is None:
            continue
        if isinstance(value, datetime):
            value = store.dialect.encode_time(value)
        elif key in TIME_LIST_FIELDS:
            value = [store.dialect.encode_time(v) for v in value]
        elif hasattr(value, "value"):
            value = value.value
        row[key] = value
    if isinstance(store, Neo4jStore) and isinstance(model, fulltext.KEYED_MODELS):
        row = fulltext.keyed(row)  # Neo4j's full-text group key (kg.store.neo4j.fulltext)
    return row


def test_a_stored_models_row_is_every_field_it_holds() -> None:
    """Each stored model, every field set (vectors too, which travel apart), maps to the
    row `model_dump` gave, value and type, on both backends; a list is the row's own."""
    from kg.schemas.graph import AuditEvent, CommunityNode, EntityNode, EpisodicNode, FactEdge
    from kg.schemas.plan import EdgeReinforcement, EdgeRetirement
    from kg.store.cypher.base import ENDPOINT_FIELDS

    at = t(2020)
    edge = FactEdge(
        uuid="e2",
        fact_uuid="e1",
        group_id="g",
        source_node_uuid="a",
        target_node_uuid="b",
        name="LIVES_IN",
        fact="A lives in B",
        fact_embedding=[0.5],
        episodes=["x", "y"],
        episode_valid_at=[at, t(2021)],
        valid_at=at,
        invalid_at=t(2022),
        created_at=at,
        expired_at=t(2023),
        invalidated_by="x",
        invalidated_edge="e3",
        invalidation_reason="r",
        supersedes="e1",
        channel="tool",
        trust=2,
        extractor="kg.llm/1",
        status="contested",
    )
    episode = EpisodicNode(
        uuid="x",
        group_id="g",
        name="n",
        source="message",
        source_description="d",
        content="hi",
        content_hash="h",
        valid_at=at,
        created_at=at,
        channel="user",
        trust=3,
        extractor="kg.llm/1",
        status="failed",
        extraction="[]",
        error="e",
        quarantine="[]",
        content_embedding=[0.1],
        search_key="k",
        key_embedding=[0.2],
        queued_at=at,
        attempts=2,
        next_attempt_at=at,
        lease_owner="w",
        lease_expires_at=at,
        idempotency_key="i",
        session_id="s",
        staged="{}",
        failure_reasons=["a", "b"],
        facts_extracted=3,
        llm_calls=1,
    )
    models: list[tuple[Any, tuple[str, ...]]] = [
        (edge, ENDPOINT_FIELDS),
        (edge, ()),
        (episode, ()),
        (
            EntityNode(
                uuid="a",
                group_id="g",
                name="A",
                name_key="a",
                labels=["Person"],
                summary="s",
                name_embedding=[0.3],
                created_at=at,
            ),
            (),
        ),
        (
            CommunityNode(
                uuid="c",
                group_id="g",
                name="C",
                summary="s",
                name_embedding=[0.4],
                created_at=at,
                episodes=["x"],
                fingerprint="f",
                stale=True,
                summarizer="llm:m",
            ),
            (),
        ),
        (
            AuditEvent(
                uuid="u", group_id="g", kind="rollback", created_at=at, episodes=["x"], detail="{}"
            ),
            (),
        ),
        (EdgeRetirement(uuid="e1", expired_at=at), ()),
        (EdgeReinforcement(uuid="e1", episode_uuid="x", valid_at=at), ()),
    ]
    for store in (FalkorDBStore.__new__(FalkorDBStore), Neo4jStore(FakeDriver(), "neo4j", None)):
        if isinstance(store, FalkorDBStore):
            from kg.store.falkordb.dialect import FalkorDialect

            store.dialect = FalkorDialect()
        for model, drop in models:
            row, dumped = store._encode(model, drop=drop), _dumped_row(store, model, drop)
            assert row == dumped and list(row) == list(dumped)
            assert [type(v) for v in row.values()] == [type(v) for v in dumped.values()]
            assert all(v is not getattr(model, k) for k, v in row.items() if type(v) is list)
