"""Real MiniLM embeddings (offline), written with facts and found through the vector index."""

from __future__ import annotations

import gc
import json
import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kg import KG
from kg.ingest.embeddings import Embedder, OpenAIEmbedder, local_minilm
from tests.conftest import Backend, add, open_test_kg, t
from tests.store_probe import nearest_facts as nearest

try:
    import httpx2
except ImportError:  # pragma: no cover
    import httpx as httpx2  # type: ignore[no-redef]


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    return local_minilm()


def cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_minilm_loads_offline_and_means_something(minilm: Embedder) -> None:
    assert minilm.dim == 384
    moved, relocated, pasta = await minilm.embed(
        ["Alice moved to Busan", "Alice relocated to the city of Busan", "I cooked pasta"]
    )
    assert math.isclose(cos(moved, moved), 1.0, abs_tol=1e-5)  # unit vectors
    assert cos(moved, relocated) > cos(moved, pasta) + 0.3


async def test_a_query_encodes_on_one_torch_thread_and_a_batch_on_torch_s_own(
    minilm: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a busy machine a query's threads wait for each other at every op (search p50 363 ms
    # on two threads, 66 ms on one, at load 4.8 on 2 cores); a batch has work to share.
    import torch

    torch.set_num_threads(2)
    st = minilm._st  # type: ignore[attr-defined]
    seen: list[int] = []
    real = st.encode

    def spy(texts: list[str], **kw: object) -> object:
        seen.append(torch.get_num_threads())
        return real(texts, **kw)

    monkeypatch.setattr(st, "encode", spy)
    await minilm.embed(["Where does Minji live these days?"])
    await minilm.embed([f"sentence {i}" for i in range(32)])
    assert seen == [1, 2] and torch.get_num_threads() == 2


async def test_a_query_asked_again_costs_no_model_time(
    minilm: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search embeds its query before anything else (about a third of a search at 100,000
    facts); an agent asks the same question again and again. Batches are not remembered."""
    st = minilm._st  # type: ignore[attr-defined]
    calls: list[list[str]] = []
    real = st.encode

    def spy(texts: list[str], **kw: object) -> object:
        calls.append(list(texts))
        return real(texts, **kw)

    monkeypatch.setattr(st, "encode", spy)
    [first] = await minilm.embed(["Who did Caroline meet at the support group?"])
    first[0] = 99.0  # the caller's copy: what is remembered stays as the model gave it
    [again] = await minilm.embed(["Who did Caroline meet at the support group?"])
    [other] = await minilm.embed(["Who did Melanie meet at the support group?"])
    batch = ["Who did Caroline meet at the support group?", "a second text"]
    await minilm.embed(batch)
    assert calls == [
        ["Who did Caroline meet at the support group?"],
        ["Who did Melanie meet at the support group?"],
        batch,
    ]
    assert again[0] != 99.0 and math.isclose(cos(again, again), 1.0, abs_tol=1e-5)
    assert cos(again, other) < 0.999


@pytest.fixture
async def kg_emb(backend: Backend, home: Path, minilm: Embedder) -> AsyncIterator[KG]:
    async with await open_test_kg(backend, home, embedder=minilm) as graph:
        yield graph


async def nearest_facts(kg: KG, minilm: Embedder, text: str, k: int = 3) -> list[str]:
    """The fact vector index queried directly: its k nearest, then the unretired ones."""
    [v] = await minilm.embed([text])
    return [r["fact"] for r in await nearest(kg, v, k) if r["expired_at"] is None]


async def test_facts_are_embedded_and_found_by_the_vector_index(
    kg_emb: KG, minilm: Embedder
) -> None:
    await add(kg_emb, t(2020), ("Alice", "LIVES_IN", "Seoul"), ("Alice", "LIKES", "Jazz music"))
    await add(kg_emb, t(2023), ("Alice", "LIVES_IN", "Busan"))
    [busan] = await kg_emb.facts(subject="Alice", predicate="LIVES_IN")
    assert busan.edge.fact == "Alice lives in Busan"
    # k covers retired versions too: the index ranks before the filter (issue 4 will fix that).
    hits = await nearest_facts(kg_emb, minilm, "Where is Alice's home?", k=10)
    assert set(hits[:2]) == {"Alice lives in Busan", "Alice lives in Seoul"}  # closed copy too
    assert (await nearest_facts(kg_emb, minilm, "her favourite kind of music"))[0] == (
        "Alice likes Jazz music"
    )


async def test_versions_rewritten_by_rollback_keep_embeddings(kg_emb: KG, minilm: Embedder) -> None:
    await add(kg_emb, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    bad = await add(kg_emb, t(2023), ("Alice", "LIVES_IN", "Pyongyang"))
    await kg_emb.rollback(bad.episode_uuid, dry_run=False)
    assert await nearest_facts(kg_emb, minilm, "Alice's city", k=5) == ["Alice lives in Seoul"]


async def test_entities_get_name_embeddings(kg_emb: KG) -> None:
    await add(kg_emb, t(2020), ("Alice", "KNOWS", "Bob"))
    rows = await kg_emb.store.raw_query(
        "default", "MATCH (n:Entity) RETURN n.name AS name, n.name_embedding AS v ORDER BY name"
    )
    assert [(r["name"], len(r["v"])) for r in rows] == [("Alice", 384), ("Bob", 384)]


async def test_openai_embedder_over_a_mocked_transport() -> None:
    seen: list[dict[str, object]] = []

    async def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        seen.append(body)
        data = [
            {"object": "embedding", "index": i, "embedding": [3.0, 4.0]}
            for i in reversed(range(len(body["input"])))
        ]
        usage = {"prompt_tokens": 3, "total_tokens": 3}
        return httpx2.Response(
            200, json={"object": "list", "data": data, "model": body["model"], "usage": usage}
        )

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    emb = OpenAIEmbedder(
        "text-embedding-3-small",
        2,
        base_url="http://127.0.0.1:9/v1",
        batch_size=2,
        http_client=client,
    )
    vectors = await emb.embed(["a", "b", "c"])
    assert [s["input"] for s in seen] == [["a", "b"], ["c"]]
    assert seen[0]["model"] == "text-embedding-3-small"
    assert vectors == [[0.6, 0.8]] * 3  # normalised
    wrong = OpenAIEmbedder("m", 3, base_url="http://127.0.0.1:9/v1", http_client=client)
    with pytest.raises(ValueError, match="expected 3"):
        await wrong.embed(["a"])


def test_the_model_heap_is_frozen_out_of_full_collections() -> None:
    # Python's full collections walked torch's heap in every search that triggered one.
    gc.unfreeze()
    local_minilm()
    assert gc.get_freeze_count() > 100_000
