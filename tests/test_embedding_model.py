"""A group records the model that embedded it; `auto` uses that model, another one is refused."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import kg.facade as facade
from kg import KG, Embedder, InputError, local_minilm
from kg.cli import app
from kg.ingest.embeddings import MINILM
from kg.schemas.embedder import EmbeddingModel
from tests.conftest import Backend, add, open_test_kg, t

runner = CliRunner()


class Fixed:
    """Same unit vector for every text: a stand-in model with a name and a dimension."""

    def __init__(self, model: str, dim: int) -> None:
        self.model, self.dim = model, dim

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1 / math.sqrt(self.dim)] * self.dim for _ in texts]


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    return local_minilm()


async def test_the_first_embedded_write_records_the_model(
    backend: Backend, home: Path, minilm: Embedder
) -> None:
    async with await open_test_kg(backend, home) as kg:
        await add(kg, t(2020), ("A", "KNOWS", "B"), group_id="plain")
        assert await kg.store.embedding_model("plain") is None  # nothing was embedded
    async with await open_test_kg(backend, home, embedder=minilm) as kg:
        await add(kg, t(2020), ("Minji", "LIVES_IN", "Seoul"))
        recorded = await kg.store.embedding_model("default")
    assert recorded == EmbeddingModel(model=MINILM, dim=384)
    assert str(recorded) == f"{MINILM} (384 dimensions)"


async def test_auto_opens_with_the_recorded_model(
    backend: Backend, home: Path, minilm: Embedder
) -> None:
    async with await open_test_kg(backend, home, embedder=minilm) as kg:
        await add(kg, t(2020), ("Minji", "LIVES_IN", "Seoul"))
    async with await open_test_kg(backend, home, embedder="auto") as kg:
        assert kg.embedder is not None and (kg.embedder.model, kg.embedder.dim) == (MINILM, 384)
        r = await kg.search("where is Minji's home city")
        [cosine] = [b for b in r.branches if b.method == "cosine" and b.scope == "facts"]
        assert cosine.error is None and cosine.hits == 1
        await add(kg, t(2021), ("Minji", "WORKS_AT", "Naver"))  # embedded by the same model
    async with await open_test_kg(backend, home, embedder="auto", group_id="never-embedded") as kg:
        assert kg.embedder is None


async def test_a_mismatched_embedder_is_refused_naming_both(
    backend: Backend, home: Path, minilm: Embedder
) -> None:
    async with await open_test_kg(backend, home, embedder=minilm) as kg:
        await add(kg, t(2020), ("Minji", "LIVES_IN", "Seoul"))
    for other in (Fixed("text-embedding-3-small", 384), Fixed(MINILM, 8)):
        async with await open_test_kg(backend, home, embedder=other) as kg:
            with pytest.raises(InputError) as raised:
                await kg.search("Minji")
            message = str(raised.value)
            assert f"was embedded with {MINILM} (384 dimensions)" in message
            assert f"the embedder given, {other.model} ({other.dim} dimensions)" in message
            assert "\n" not in message
            with pytest.raises(InputError, match="was embedded with"):
                await add(kg, t(2022), ("Minji", "LIVES_IN", "Busan"))
            assert (await kg.stats()).episodes == 1  # nothing written
            if backend.name == "neo4j" and other.dim != 384:
                # One Neo4j database has one vector index per label, of one dimension, for
                # every group; FalkorDB has a graph and indexes per group (the next lines).
                with pytest.raises(
                    InputError, match="one Neo4j database holds one embedding dimension"
                ) as refused:
                    await add(kg, t(2022), ("Jun", "LIVES_IN", "Busan"), group_id="fresh")
                assert "384 dimensions" in str(refused.value) and "gives 8" in str(refused.value)
                assert "fresh" not in await kg.groups()
                continue
            await add(kg, t(2022), ("Jun", "LIVES_IN", "Busan"), group_id="fresh")
            assert await kg.store.embedding_model("fresh") == EmbeddingModel.of(other)
            await kg.erase_group("fresh")
            assert await kg.store.embedding_model("fresh") is None
    async with await open_test_kg(backend, home, embedder=minilm) as kg:  # erased: free to re-embed
        await add(kg, t(2022), ("Jun", "LIVES_IN", "Busan"), group_id="fresh")
        assert await kg.store.embedding_model("fresh") == EmbeddingModel(model=MINILM, dim=384)
        await kg.erase_group("fresh")
        await add(kg, t(2022), ("Jun", "LIVES_IN", "Busan"), group_id="fresh")
        assert await kg.store.embedding_model("fresh") == EmbeddingModel(model=MINILM, dim=384)


async def test_auto_runs_without_a_model_it_cannot_load(
    backend: Backend, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with await open_test_kg(backend, home, embedder=Fixed("text-embedding-3-small", 8)) as kg:
        await add(kg, t(2020), ("Minji", "LIVES_IN", "Seoul"))
    with caplog.at_level(logging.WARNING, logger="kg"):
        async with await open_test_kg(backend, home, embedder="auto") as kg:
            assert kg.embedder is None
            assert (await kg.search("Minji")).facts  # BM25 still answers
    assert "was embedded with text-embedding-3-small (8 dimensions)" in caplog.text
    assert "cannot be loaded here" in caplog.text


async def test_an_export_carries_the_model_to_the_imported_group(
    backend: Backend, tmp_path: Path, minilm: Embedder
) -> None:
    async with await open_test_kg(backend, tmp_path / "a", embedder=minilm) as kg:
        await add(kg, t(2020), ("Minji", "LIVES_IN", "Seoul"))
        lines = [line async for line in kg.export_lines()]
    assert json.loads(lines[0])["embedding_model"] == {"model": MINILM, "dim": 384}
    async with await open_test_kg(backend, tmp_path / "b", embedder=minilm) as kg:
        await kg.import_lines(lines, into="copy")
        assert await kg.store.embedding_model("copy") == EmbeddingModel(model=MINILM, dim=384)
    bad = [lines[0].replace('"dim":384', '"dim":512'), *lines[1:]]
    async with await open_test_kg(backend, tmp_path / "c", embedder=minilm) as kg:
        with pytest.raises(
            InputError, match=r"the header names .* \(512 dimensions\), the vectors have 384"
        ):
            await kg.import_lines(bad, into="other")
        assert "other" not in await kg.groups()


def test_the_cli_searches_with_the_recorded_model_by_default(
    backend: Backend, home: Path, tmp_path: Path
) -> None:
    path = tmp_path / "e.jsonl"
    row = {"subject": "Minji", "predicate": "LIVES_IN", "object": "Seoul"}
    path.write_text(
        json.dumps({"source": "facts", "reference_time": "2020-01-01T00:00:00Z", "facts": [row]})
    )
    base = backend.cli_args(home)
    assert runner.invoke(app, [*base, "--embedder", "minilm", "ingest", str(path)]).exit_code == 0
    r = runner.invoke(app, [*base, "search", "where is Minji's home city", "--json"])
    assert r.exit_code == 0, r.stderr
    [cosine] = [
        b
        for b in json.loads(r.stdout)["branches"]
        if b["method"] == "cosine" and b["scope"] == "facts"
    ]
    assert cosine["error"] is None and cosine["hits"] == 1
    r = runner.invoke(app, [*base, "--embedder", "none", "search", "Minji", "--json"])
    [cosine] = [
        b
        for b in json.loads(r.stdout)["branches"]
        if b["method"] == "cosine" and b["scope"] == "facts"
    ]
    assert "no embedder" in cosine["error"]  # asked for none: none


def test_the_cli_refuses_a_mismatched_embedder_in_one_line(backend: Backend, home: Path) -> None:
    async def embed_with_another_model() -> None:
        async with await open_test_kg(backend, home, embedder=Fixed("fake-8", 8)) as kg:
            await add(kg, t(2020), ("Minji", "LIVES_IN", "Seoul"))

    asyncio.run(embed_with_another_model())
    r = runner.invoke(app, [*backend.cli_args(home), "--embedder", "minilm", "search", "Minji"])
    assert r.exit_code == 1
    assert r.stderr.startswith("kg: error: group 'default' was embedded with fake-8 (8 dimensions)")
    assert f"{MINILM} (384 dimensions)" in r.stderr and r.stderr.strip().count("\n") == 0


@pytest.mark.falkordb_only("the embedded server is a child process kg starts and must stop")
async def test_a_refused_auto_open_leaves_no_server_running(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    servers: list[Any] = []
    open_store = facade.open_store

    async def spy(*args: Any, **kwargs: Any) -> Any:
        store = await open_store(*args, **kwargs)
        servers.append(store.server.process)
        return store

    monkeypatch.setattr(facade, "open_store", spy)
    with pytest.raises(InputError, match="invalid group_id 'no spaces'"):
        await KG.open(home=home, embedder="auto", group_id="no spaces")
    # Refused before a server is started (KG.open checks the group first), or stopped.
    assert all(server.poll() is not None for server in servers)
