"""A scripted agent over MCP, as a model would drive kg, on both transports (streamable HTTP
through `kg serve`, stdio through `kg mcp`) with the official client: list the tools (with
annotations and output schemas) and the ontology, remember with date-only times, search,
follow a hit's id to `why`, roll the episode back, forget with a dry run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from kg import KG
from kg.schemas.ontology import Ontology
from kg.server.mcp import build_mcp, refresh_instructions
from kg.server.service import ShuttingDownError
from tests.mcp_client import call, facts, mcp_http, mcp_stdio
from tests.served import ROOT, Served, kg_command, kg_env, serve


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
        s,
        "add_memory",
        source="facts",
        reference_time="2020-01-01",
        facts=[
            {
                "subject": "Alice",
                "predicate": "LIVES_IN",
                "object": "Paris",
                "valid_at": "2020-01-01",
            }
        ],
    )
    moved = await call(
        s,
        "add_memory",
        source="facts",
        reference_time="2022-06-01",
        facts=[
            {"subject": "Alice", "predicate": "LIVES_IN", "object": "Berlin", "valid_at": "2022-06"}
        ],
    )
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


ONTOLOGY = {
    "name": "homes",
    "strict": True,
    "predicates": [{"name": "RESIDES_IN", "cardinality": "one", "description": "Home town."}],
}


async def test_the_instructions_and_the_resource_are_the_stores_ontology(tmp_path: Path) -> None:
    """`kg --ontology F mcp`: the model is told F's predicates, not the default ones."""
    path = tmp_path / "ontology.json"
    path.write_text(json.dumps(ONTOLOGY))
    params = StdioServerParameters(
        command=kg_command()[0],
        args=[*kg_command()[1:], "--ontology", str(path), "mcp", "--group", "o"],
        env=kg_env(tmp_path / "home"),
        cwd=str(ROOT),
    )
    async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as s:
        hello = await s.initialize()
        read = await s.read_resource("kg://ontology")
    assert hello.instructions and "RESIDES_IN (Home town)" in hello.instructions
    assert "LIVES_IN" not in hello.instructions and "Only these predicates" in hello.instructions
    doc = json.loads(read.contents[0].text)  # type: ignore[union-attr]
    assert doc["predicates"][0]["closes"] == "the subject's previous RESIDES_IN"


def test_over_http_the_instructions_follow_the_store_once_open() -> None:
    """The HTTP app registers the tools before its store opens: the default ontology until
    then, the store's after (refreshed in front of every MCP request)."""
    opened: list[Any] = []

    def memory() -> Any:
        if not opened:
            raise ShuttingDownError("the server is not ready")
        return opened[0]

    server = build_mcp(memory)
    assert "LIVES_IN" in (server.instructions or "")
    opened.append(SimpleNamespace(kg=SimpleNamespace(ontology=Ontology.model_validate(ONTOLOGY))))
    refresh_instructions(server)  # type: ignore[arg-type]
    assert "RESIDES_IN" in (server.instructions or "")
    assert "LIVES_IN" not in (server.instructions or "")


@pytest.mark.skipif(
    not hasattr(KG, "resolve_id"), reason="id prefixes come with KG.resolve_id (issue 24 item 3)"
)
async def test_an_agent_may_give_the_ids_it_was_shown_in_short(served: Served) -> None:
    """The 8 characters a table shows, or any unique prefix of 6+, wherever a tool takes an
    id: why, get_fact and rollback_episode."""
    async with mcp_http(served, served.key("agent", "admin")) as s:
        added = await call(
            s,
            "add_memory",
            source="facts",
            facts=[{"subject": "Pia", "predicate": "WORKS_AT", "object": "Nimbus"}],
        )
        [fact] = (await call(s, "facts_as_of", subject="Pia"))["items"]
        assert (await call(s, "get_fact", fact_id=fact["id"][:8]))["id"] == fact["id"]
        assert (await call(s, "why", fact_id=fact["id"][:6]))["fact"]["id"] == fact["id"]
        plan = await call(s, "rollback_episode", episode_id=added["episode_id"][:8])
        assert plan["episodes"] == [added["episode_id"]]
