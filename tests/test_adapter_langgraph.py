"""kg.adapters.langgraph.KGStore through LangGraph's own `BaseStore` interface and a compiled
graph, against the embedded `KG` and a real `kg serve` (through `AsyncClient`) alike."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph", reason="needs the langgraph extra (pip install kg[langgraph])")

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore

from kg import KG
from kg.adapters.langgraph import KGStore
from kg.client import AsyncClient
from tests.served import Served, serve


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = serve(tmp_path_factory.mktemp("langgraph") / "home", [("lg", "write", "user")])
    try:
        yield s
    finally:
        assert s.stop() == 0, s.log()


@pytest.fixture(params=["embedded", "server"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, served: Served
) -> AsyncIterator[KGStore]:
    if request.param == "embedded":
        async with await KG.open(home=tmp_path / "home", embedder=None) as kg:
            yield KGStore(kg, group_id="lg")
    else:
        # A fresh group per test: a key per test would need the store before the server.
        async with AsyncClient(served.url, served.key("lg", "write")) as client:
            store = KGStore(client)
            for ns in await store.alist_namespaces(limit=1000):
                for item in await store.asearch(ns, limit=1000):
                    await store.adelete(item.namespace, item.key)
            yield store


async def test_put_get_overwrite_delete(store: KGStore) -> None:
    ns = ("users", "minji", "memories")
    assert await store.aget(ns, "home") is None
    await store.aput(ns, "home", {"city": "Seoul", "since": 2021})
    first = await store.aget(ns, "home")
    assert first is not None and first.value == {"city": "Seoul", "since": 2021}
    assert (first.namespace, first.key) == (ns, "home")
    await store.aput(ns, "home", {"city": "Busan", "since": 2024})
    second = await store.aget(ns, "home")
    assert second is not None and second.value == {"city": "Busan", "since": 2024}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    await store.adelete(ns, "home")
    assert await store.aget(ns, "home") is None


async def test_keys_differing_in_case_or_slashes_stay_apart(store: KGStore) -> None:
    await store.aput(("a",), "Key", {"v": 1})
    await store.aput(("a",), "key", {"v": 2})
    await store.aput(("a", "b"), "c", {"v": 3})
    await store.aput(("a",), "b/c", {"v": 4})
    got = [await store.aget(ns, k) for ns, k in [(("a",), "Key"), (("a",), "key")]]
    assert [i.value["v"] for i in got if i] == [1, 2]
    await store.aput(("a/b",), "c", {"v": 5})
    paths = [(("a", "b"), "c"), (("a",), "b/c"), (("a/b",), "c")]
    got = [await store.aget(ns, k) for ns, k in paths]
    assert [i.value["v"] for i in got if i] == [3, 4, 5]


async def test_search_by_query_filter_and_prefix(store: KGStore) -> None:
    await store.aput(("u1", "prefs"), "food", {"text": "likes spicy kimchi stew", "n": 3})
    await store.aput(("u1", "prefs"), "drink", {"text": "drinks green tea every morning", "n": 1})
    await store.aput(("u2", "prefs"), "food", {"text": "likes mild kimchi pancakes", "n": 5})
    hits = await store.asearch(("u1",), query="kimchi")
    assert [(h.namespace, h.key) for h in hits] == [(("u1", "prefs"), "food")]
    assert hits[0].score is not None
    both = await store.asearch((), query="kimchi")
    assert {h.namespace[0] for h in both} == {"u1", "u2"}
    listed = await store.asearch(("u1", "prefs"))
    assert [h.key for h in listed] == ["drink", "food"]  # newest first
    big = await store.asearch((), filter={"n": {"$gte": 3}})
    assert sorted(h.value["n"] for h in big) == [3, 5]
    assert [h.key for h in await store.asearch((), filter={"n": 1})] == ["drink"]


async def test_list_namespaces(store: KGStore) -> None:
    for ns in [("u1", "prefs"), ("u1", "notes"), ("u2", "prefs")]:
        await store.aput(ns, "k", {"x": 1})
    assert await store.alist_namespaces(prefix=("u1",)) == [("u1", "notes"), ("u1", "prefs")]
    assert await store.alist_namespaces(suffix=("prefs",)) == [("u1", "prefs"), ("u2", "prefs")]
    assert await store.alist_namespaces(max_depth=1) == [("u1",), ("u2",)]


async def test_sync_methods_from_a_thread(tmp_path: Path, served: Served) -> None:
    """LangGraph runs sync nodes in threads: the store's sync calls run on its own loop."""
    store = KGStore(AsyncClient(served.url, served.key("lg", "write")))

    def sync_work() -> Any:
        store.put(("sync",), "k", {"v": "from a thread"})
        item = store.get(("sync",), "k")
        store.delete(("sync",), "k")
        return item.value if item else None

    assert await asyncio.to_thread(sync_work) == {"v": "from a thread"}


class State(TypedDict):
    user: str
    said: str
    recalled: list[str]


async def remember(state: State, runtime: Runtime[None]) -> dict[str, Any]:
    assert runtime.store is not None
    ns = ("memories", state["user"])
    if state["said"]:
        await runtime.store.aput(ns, f"m{len(state['said'])}", {"text": state["said"]})
    found = await runtime.store.asearch(ns)
    return {"recalled": [item.value["text"] for item in found]}


async def test_a_compiled_graph_keeps_memories_across_runs(store: BaseStore) -> None:
    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    graph = builder.compile(store=store)
    await graph.ainvoke({"user": "minji", "said": "I moved to Busan", "recalled": []})
    later = await graph.ainvoke({"user": "minji", "said": "", "recalled": []})
    assert later["recalled"] == ["I moved to Busan"]
    other = await graph.ainvoke({"user": "joon", "said": "", "recalled": []})
    assert other["recalled"] == []
