"""kg.adapters.llamaindex.KGRetriever through LlamaIndex's own retriever interface
(`retrieve`, `aretrieve`, and a `RetrieverQueryEngine` with LlamaIndex's MockLLM) against a
real `kg serve`, and the same nodes from the embedded `KG`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("llama_index.core", reason="needs the llamaindex extra (kg[llamaindex])")

from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeWithScore

from kg.adapters.llamaindex import KGRetriever
from kg.client import AsyncClient
from tests.adapter_seed import GROUP, seeded_kg, seeded_server
from tests.served import Served


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = seeded_server(tmp_path_factory.mktemp("llamaindex") / "home")
    try:
        yield s
    finally:
        assert s.stop() == 0, s.log()


def facts_of(nodes: list[NodeWithScore]) -> list[tuple[str, str, str]]:
    m = [n.node.metadata for n in nodes if n.node.metadata["kind"] == "fact"]
    return [(x["subject"], x["predicate"], x["object"]) for x in m]


def test_retrieve_from_sync_code(served: Served) -> None:
    retriever = KGRetriever(AsyncClient(served.url, served.key(GROUP, "write")), top_k=2)
    nodes = retriever.retrieve("Where does Minji live? Busan")
    assert len(nodes) == 2 and ("Minji", "LIVES_IN", "Busan") in facts_of(nodes)
    assert nodes[0].score is not None and nodes[0].score >= nodes[1].score  # type: ignore[operator]


async def test_aretrieve_server_and_embedded_agree(served: Served, tmp_path: Path) -> None:
    query = "Minji Kakao"
    async with AsyncClient(served.url, served.key(GROUP, "write")) as client:
        remote = await KGRetriever(client, top_k=3).aretrieve(query)
    kg = await seeded_kg(tmp_path / "home")
    try:
        local = await KGRetriever(kg, top_k=3).aretrieve(query)
    finally:
        await kg.close()
    assert ("Minji", "WORKS_AT", "Kakao") in facts_of(remote)
    assert [n.node.get_content() for n in local] == [n.node.get_content() for n in remote]


async def test_a_query_engine_answers_from_kg_nodes(served: Served) -> None:
    async with AsyncClient(served.url, served.key(GROUP, "write")) as client:
        engine = RetrieverQueryEngine.from_args(KGRetriever(client, top_k=2), llm=MockLLM())
        response = await engine.aquery("Where does Minji live? Busan")
    assert ("Minji", "LIVES_IN", "Busan") in facts_of(response.source_nodes)
