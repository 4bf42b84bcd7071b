"""kg.adapters.langchain.KGRetriever: LangChain's own standard retriever tests
(langchain-tests' RetrieversIntegrationTests) against a real `kg serve`, and the same
documents from the embedded `KG`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "langchain_core", reason="needs the langchain extra (pip install kg[langchain])"
)
pytest.importorskip("langchain_tests", reason="needs langchain-tests (the dev extra)")

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_tests.integration_tests import RetrieversIntegrationTests

from kg.adapters.langchain import KGRetriever
from kg.client import AsyncClient
from tests.adapter_seed import GROUP, seeded_kg, seeded_server
from tests.served import Served

SERVER: list[Served] = []


@pytest.fixture(scope="module", autouse=True)
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = seeded_server(tmp_path_factory.mktemp("langchain") / "home")
    SERVER.append(s)
    try:
        yield s
    finally:
        SERVER.remove(s)
        assert s.stop() == 0, s.log()


class TestKGRetrieverStandard(RetrieversIntegrationTests):
    """LangChain's conformance suite: constructor `k`, `invoke(..., k=)`, sync and async."""

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return KGRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        server = SERVER[0]
        return {"memory": AsyncClient(server.url, server.key(GROUP, "write"))}

    @property
    def retriever_query_example(self) -> str:
        return "Minji"


def facts_of(docs: list[Document]) -> list[tuple[str, str, str]]:
    m = [d.metadata for d in docs if d.metadata["kind"] == "fact"]
    return [(x["subject"], x["predicate"], x["object"]) for x in m]


async def test_documents_carry_kg_fields_from_server_and_embedded(
    served: Served, tmp_path: Path
) -> None:
    query = "Where does Minji live? Busan"
    async with AsyncClient(served.url, served.key(GROUP, "write")) as client:
        remote = await KGRetriever(memory=client, k=10).ainvoke(query)
    assert ("Minji", "LIVES_IN", "Busan") in facts_of(remote)
    top = remote[0]
    assert top.page_content and top.id == top.metadata["id"]
    assert {"kind", "score", "valid_from", "trust"} <= set(top.metadata)
    kg = await seeded_kg(tmp_path / "home")
    try:
        local = await KGRetriever(memory=kg, k=10).ainvoke(query)
    finally:
        await kg.close()
    # Items tied in score are ordered by uuid, which differs between the two stores.
    assert sorted(facts_of(local)) == sorted(facts_of(remote))
    assert sorted(d.page_content for d in local) == sorted(d.page_content for d in remote)
