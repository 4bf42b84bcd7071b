"""MCP against real processes with the official MCP Python client: streamable HTTP at /mcp
of a `kg serve`, and stdio against `kg mcp`. Every tool, the roles, and isolation: another
group's data never shows and its ids are not found."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.served import ROOT, Served, kg_command, kg_env, serve

KEYS = [("alice", "admin"), ("alice", "write"), ("alice", "read"), ("bob", "admin")]
TOOLS = {
    "add_memory",
    "search_memory",
    "facts_as_of",
    "fact_history",
    "why",
    "forget",
    "rollback_episode",
}


@asynccontextmanager
async def mcp_http(served: Served, key: str) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        streamable_http_client(served.url + "/mcp", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session


async def call(s: ClientSession, tool: str, **args: Any) -> Any:
    r = await s.call_tool(tool, args)
    assert not r.is_error, r.content
    if r.structured_content is not None:
        return r.structured_content.get("result", r.structured_content)
    return r.content[0].text  # type: ignore[union-attr]


async def error(s: ClientSession, tool: str, **args: Any) -> str:
    r = await s.call_tool(tool, args)
    assert r.is_error, r
    text: str = r.content[0].text  # type: ignore[union-attr]
    assert "Traceback" not in text and "\n" not in text
    return text


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = serve(tmp_path_factory.mktemp("serve-mcp") / "home", KEYS)
    try:
        yield s
    finally:
        s.stop()


def paris_then_berlin() -> list[dict[str, Any]]:
    return [
        {
            "subject": "Alice",
            "predicate": "LIVES_IN",
            "object": "Paris",
            "valid_at": "2020-01-01T00:00:00Z",
        },
        {
            "subject": "Alice",
            "predicate": "LIVES_IN",
            "object": "Berlin",
            "valid_at": "2022-06-01T00:00:00Z",
        },
    ]


async def test_every_tool_over_streamable_http(served: Served) -> None:
    async with mcp_http(served, served.key("alice", "write")) as s:
        tools = (await s.list_tools()).tools
        assert {t.name for t in tools} == TOOLS
        for t in tools:
            assert t.description and len(t.description) > 80, t.name
            assert not any("group" in p for p in t.input_schema.get("properties", {})), t.name
        added = await call(
            s,
            "add_memory",
            source="facts",
            facts=paris_then_berlin(),
            reference_time="2020-01-01T00:00:00Z",
        )
        assert added["status"] == "added" and added["facts_added"] == 2
        assert added["facts_closed"] == 1
        block = await call(s, "search_memory", query="Where does Alice live?")
        assert "Alice lives in Berlin" in block and "valid 2022-06-01" in block
        assert "Paris" not in block  # closed: left out of the default view
        # Time words read against asked_at (a closed fact is found in its window), and
        # abstention, as kg search --asked-at / --abstain-below.
        then = await call(
            s, "search_memory", query="where did Alice live last year",
            asked_at="2021-07-01T09:00:00+09:00",
        )  # fmt: skip
        assert "Alice lives in Paris" in then and "Berlin" not in then
        # No embedder on this server: abstention (a cosine cutoff) is refused, not silently
        # turned into "nothing matched".
        assert "abstain_below needs an embedder" in await error(
            s, "search_memory", query="Where does Alice live?", abstain_below=0.49
        )
        assert "abstain_below" in await error(s, "search_memory", query="Alice", abstain_below=1.5)
        assert "is a number, not a time" in await error(
            s, "search_memory", query="Alice", asked_at="1700000000"
        )
        then = await call(s, "facts_as_of", subject="Alice", valid_at="2021-01-01T00:00:00Z")
        assert [f["object"] for f in then] == ["Paris"]
        history = await call(s, "fact_history", subject="Alice", predicate="LIVES_IN")
        assert {f["object"] for f in history} == {"Paris", "Berlin"}
        closed = next(f for f in history if f["object"] == "Paris" and f["invalid_at"])
        assert closed["closed_by_episode"] == added["episode_id"]
        why = await call(s, "why", fact_id=closed["id"])
        assert added["episode_id"] in {e["episode_id"] for e in why["episodes"]}
        plan = await call(s, "rollback_episode", episode_id=added["episode_id"])
        assert plan["applied"] is False
        assert {c["object"] for c in plan["removed"]} == {"Paris", "Berlin"}
        # The write role stops here.
        assert "admin" in await error(
            s, "rollback_episode", episode_id=added["episode_id"], apply=True
        )
        assert "admin" in await error(s, "forget", entity="Alice", confirm="Alice")
        # Same models, same messages as the HTTP API.
        with served.client("alice", "read") as c:
            http = c.get("/v1/facts", params={"valid_at": "someday"}).json()["detail"]
        assert http in await error(s, "facts_as_of", subject="Alice", valid_at="someday")
        number = "is a number, not a time"
        assert number in await error(
            s,
            "add_memory",
            source="facts",
            facts=[{"subject": "A", "predicate": "LIVES_IN", "object": "B", "valid_at": 2021}],
        )
        assert number in await error(s, "facts_as_of", subject="Alice", valid_at="1700000000")
        # A year is a year (issue 24): what was true during 2021's first instant.
        then = await call(s, "facts_as_of", subject="Alice", valid_at="2021")
        assert [f["object"] for f in then] == ["Paris"]
        assert (
            "extra"
            in (
                await error(
                    s,
                    "add_memory",
                    source="facts",
                    facts=[
                        {"subject": "A", "predicate": "LIVES_IN", "object": "B", "group_id": "bob"}
                    ],
                )
            ).lower()
        )
    async with mcp_http(served, served.key("alice", "read")) as s:
        assert "write" in await error(s, "add_memory", content="x", extract=False)
        assert await call(s, "facts_as_of", subject="Alice")  # reads are fine


async def test_admin_tools(served: Served) -> None:
    async with mcp_http(served, served.key("alice", "admin")) as s:
        poison = await call(
            s,
            "add_memory",
            source="facts",
            reference_time="2024-01-01T00:00:00Z",
            facts=[{"subject": "Alice", "predicate": "LIVES_IN", "object": "Mars"}],
        )
        assert [f["object"] for f in await call(s, "facts_as_of", subject="Alice")] == ["Mars"]
        undone = await call(s, "rollback_episode", episode_id=poison["episode_id"], apply=True)
        assert undone["applied"] and [c["object"] for c in undone["restored"]] == ["Berlin"]
        await call(
            s,
            "add_memory",
            source="facts",
            facts=[{"subject": "Eve", "predicate": "WORKS_AT", "object": "Evil Corp"}],
        )
        assert "confirm" in await error(s, "forget", entity="Eve", confirm="yes")
        preview = await call(s, "forget", entity="Eve")  # no confirm: a dry run
        assert preview["dry_run"] and preview["episodes_deleted"] == 1
        assert await call(s, "facts_as_of", subject="Eve") != []
        receipt = await call(s, "forget", entity="Eve", confirm="Eve")
        assert receipt["subject"] == "Eve" and receipt["episodes_deleted"] == 1
        assert await call(s, "facts_as_of", subject="Eve") == []
        text = await call(s, "add_memory", content="Alice prefers window seats", extract=False)
        assert text["status"] == "added"
        assert "window seats" in await call(s, "search_memory", query="window seats")
        # wait=false: queued at once, written by the server's background worker.
        queued = await call(
            s, "add_memory", source="facts", wait=False,
            facts=[{"subject": "Alice", "predicate": "WORKS_AT", "object": "Acme"}],
        )  # fmt: skip
        assert queued["status"] == "queued" and "facts_added" not in queued
        assert await eventually(s, "facts_as_of", subject="Alice", predicate="WORKS_AT")


async def eventually(s: ClientSession, tool: str, **args: Any) -> Any:
    """The tool's answer once it is not empty (a queued episode written by the worker)."""
    for _ in range(300):
        found = await call(s, tool, **args)
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"{tool} {args}: still nothing after 30 s")


async def test_isolation_every_tool(served: Served) -> None:
    """Bob's admin key through every tool, aimed at Alice's data."""
    async with mcp_http(served, served.key("alice", "admin")) as a:
        mine = await call(
            a,
            "add_memory",
            source="facts",
            reference_time="2019-01-01T00:00:00Z",
            facts=[{"subject": "Alice", "predicate": "KNOWS", "object": "Zed"}],
        )
        fact_id = (await call(a, "facts_as_of", subject="Alice", predicate="KNOWS"))[0]["id"]
    async with mcp_http(served, served.key("bob", "admin")) as b:
        await call(
            b,
            "add_memory",
            source="facts",
            facts=[{"subject": "Bob", "predicate": "LIVES_IN", "object": "Rome"}],
        )
        block = await call(b, "search_memory", query="Alice Zed Berlin Paris", include_history=True)
        assert "Alice" not in block and "Rome" not in block.split("<facts>")[0]
        assert await call(b, "facts_as_of", subject="Alice") == []
        assert await call(b, "facts_as_of", object="Zed") == []
        assert await call(b, "fact_history", subject="Alice") == []
        assert {f["subject"] for f in await call(b, "fact_history")} == {"Bob"}
        for text in (
            await error(b, "why", fact_id=fact_id),
            await error(b, "rollback_episode", episode_id=mine["episode_id"]),
            await error(b, "rollback_episode", episode_id=mine["episode_id"], apply=True),
            await error(b, "forget", entity="Alice", confirm="Alice"),
        ):
            assert "not found" in text and "'bob'" in text
        made_up = await error(b, "why", fact_id="0" * 36)
        assert made_up.replace("0" * 36, fact_id) == await error(b, "why", fact_id=fact_id)
    async with mcp_http(served, served.key("alice", "read")) as a:
        assert [
            f["object"] for f in await call(a, "facts_as_of", subject="Alice", predicate="KNOWS")
        ] == ["Zed"]


async def test_a_bad_key_gets_no_session(served: Served) -> None:
    with pytest.raises((MCPError, Exception)) as caught:
        async with mcp_http(served, "kg_aaaaaaaaaaaa_" + "x" * 43) as s:
            await s.list_tools()
    assert "401" in repr(caught.value) or "error" in repr(caught.value).lower()
    with served.client() as c:
        r = c.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": "Bearer nope", "Accept": "application/json"},
        )
    assert r.status_code == 401 and r.json()["detail"] == "invalid or revoked API key"


async def test_stdio_kg_mcp_binds_one_group(tmp_path: Path) -> None:
    home = tmp_path / "home"
    params = StdioServerParameters(
        command=kg_command()[0],
        args=[*kg_command()[1:], "mcp", "--group", "carol"],
        env=kg_env(home),
        cwd=str(ROOT),
    )
    async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as s:
        await s.initialize()
        assert {t.name for t in (await s.list_tools()).tools} == TOOLS
        added = await call(s, "add_memory", source="facts", facts=paris_then_berlin())
        assert added["facts_added"] == 2
        assert "Berlin" in await call(s, "search_memory", query="Alice live")
        assert [
            f["object"]
            for f in await call(s, "facts_as_of", subject="Alice", valid_at="2021-01-01T00:00:00Z")
        ] == ["Paris"]
        assert "admin" in await error(s, "forget", entity="Alice", confirm="Alice")
        queued = await call(
            s, "add_memory", source="facts", wait=False,
            facts=[{"subject": "Dana", "predicate": "WORKS_AT", "object": "Acme"}],
        )  # fmt: skip
        assert queued["status"] == "queued"
        assert await eventually(s, "facts_as_of", subject="Dana")  # kg mcp's own worker
    # The group was the flag's: a store opened afterwards finds it there and only there.
    from kg import KG

    async with await KG.open(home=home) as kg:
        assert await kg.groups() == ["carol"]
        assert (
            json.dumps([f.object for f in await kg.facts(group_id="carol", subject="Alice")])
            == '["Berlin"]'
        )
