"""A scripted agent over MCP, as a model would drive kg, on both transports (streamable HTTP
through `kg serve`, stdio through `kg mcp`) with the official client: list the tools (with
annotations and output schemas) and the ontology, remember with date-only times, search,
follow a hit's id to `why`, roll the episode back, forget with a dry run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import ClientSession

from tests.mcp_client import call, facts, mcp_http, mcp_stdio
from tests.served import Served, serve


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = serve(tmp_path_factory.mktemp("serve-agent") / "home", [("agent", "admin")])
    try:
        yield s
    finally:
        s.stop()


async def what_it_offers(s: ClientSession) -> None:
    tools = {t.name: t for t in (await s.list_tools()).tools}
    for name, t in tools.items():
        assert t.output_schema and t.output_schema["type"] == "object", name
        assert t.annotations is not None, name
    assert tools["search_memory"].annotations.read_only_hint  # type: ignore[union-attr]
    assert tools["forget"].annotations.destructive_hint  # type: ignore[union-attr]
    assert tools["rollback_episode"].annotations.idempotent_hint  # type: ignore[union-attr]
    fact_item = tools["add_memory"].input_schema["properties"]["facts"]["items"]
    assert fact_item["required"] == ["subject", "predicate", "object"]
    assert tools["add_memory"].input_schema["properties"]["source"]["enum"]
    read = await s.read_resource("kg://ontology")
    ontology = json.loads(read.contents[0].text)  # type: ignore[union-attr]
    one = {p["name"] for p in ontology["predicates"] if p["cardinality"] == "one"}
    assert "LIVES_IN" in one
    assert {p.name for p in (await s.list_prompts()).prompts}  # advertised, so not empty


async def agent_session(s: ClientSession) -> None:
    await what_it_offers(s)
    paris = await call(
        s, "add_memory", source="facts", reference_time="2020-01-01",
        facts=[{"subject": "Alice", "predicate": "LIVES_IN", "object": "Paris",
                "valid_at": "2020-01-01"}],
    )  # fmt: skip
    moved = await call(
        s, "add_memory", source="facts", reference_time="2022-06-01",
        facts=[{"subject": "Alice", "predicate": "LIVES_IN", "object": "Berlin",
                "valid_at": "2022-06"}],
    )  # fmt: skip
    assert paris["status"] == moved["status"] == "added" and moved["facts_closed"] == 1
    # Search, then follow the hit's id to where it came from.
    hit = facts(await call(s, "search_memory", query="Where does Alice live?"))[0]
    assert (hit["object"], hit["valid_from"]) == ("Berlin", "2022-06-01T00:00:00Z")
    why = await call(s, "why", fact_id=hit["id"])
    assert hit["episode_id"] == moved["episode_id"] in {e["id"] for e in why["episodes"]}
    # Roll that episode back: a plan first, then done; Paris is current again.
    plan = await call(s, "rollback_episode", episode_id=hit["episode_id"])
    assert not plan["applied"] and [c["object"] for c in plan["restored"]] == ["Paris"]
    done = await call(s, "rollback_episode", episode_id=hit["episode_id"], dry_run=False)
    assert done["applied"] and "Berlin" in {c["object"] for c in done["removed"]}
    now = facts(await call(s, "search_memory", query="Where does Alice live?"))
    assert [(h["object"], h["status"]) for h in now] == [("Paris", "current")]
    # Forget, as a dry run: what would go is listed, nothing goes.
    preview = await call(s, "forget", subject="Alice")
    assert preview["dry_run"] and preview["episodes_deleted"] == 2
    still = await call(s, "facts_as_of", subject="Alice")
    assert [f["object"] for f in still["items"]] == ["Paris"]


async def test_an_agent_session_over_streamable_http(served: Served) -> None:
    async with mcp_http(served, served.key("agent", "admin")) as s:
        await agent_session(s)


async def test_an_agent_session_over_stdio(tmp_path: Path) -> None:
    async with mcp_stdio(tmp_path / "home", "--group", "agent", "--role", "admin") as s:
        await agent_session(s)
