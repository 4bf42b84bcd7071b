"""MCP against real processes with the official MCP Python client: streamable HTTP at /mcp
of a `kg serve`, and stdio against `kg mcp`. Every tool, the roles, and isolation: another
group's data never shows and its ids are not found."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.mcp_client import call, error, eventually, facts, mcp_http, mcp_stdio
from tests.served import Served, serve

KEYS = [("alice", "admin"), ("alice", "write"), ("alice", "read"), ("bob", "admin")]
TOOLS = {
    "add_memory",
    "search_memory",
    "search_entities",
    "facts_as_of",
    "fact_history",
    "get_fact",
    "why",
    "list_episodes",
    "forget",
    "rollback_episode",
}


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


def objects(page: dict[str, Any]) -> list[str]:
    return [f["object"] for f in page["items"]]


async def test_every_tool_over_streamable_http(served: Served) -> None:
    async with mcp_http(served, served.key("alice", "write")) as s:
        tools = (await s.list_tools()).tools
        assert {t.name for t in tools} == TOOLS
        added = await call(
            s,
            "add_memory",
            source="facts",
            facts=paris_then_berlin(),
            reference_time="2020-01-01T00:00:00Z",
        )
        assert added["status"] == "added" and added["facts_added"] == 2
        assert added["facts_closed"] == 1
        found = facts(await call(s, "search_memory", query="Where does Alice live?"))
        assert [(h["object"], h["valid_from"], h["status"]) for h in found] == [
            ("Berlin", "2022-06-01T00:00:00Z", "current")
        ]  # Paris is closed: left out of the default view
        # Time words read against asked_at (a closed fact is found in its window), and
        # abstention, as kg search --asked-at / --abstain-below.
        then = await call(
            s,
            "search_memory",
            query="where did Alice live last year",
            asked_at="2021-07-01T09:00:00+09:00",
        )
        assert [h["object"] for h in facts(then)] == ["Paris"]
        # No embedder on this server: abstention (a cosine cutoff) is refused, not silently
        # turned into "nothing matched".
        assert "abstain_below needs an embedder" in await error(
            s, "search_memory", query="Where does Alice live?", abstain_below=0.49
        )
        assert "abstain_joint_below needs an embedder" in await error(
            s, "search_memory", query="Where does Alice live?", abstain_joint_below=0.27
        )
        assert "abstain_below" in await error(s, "search_memory", query="Alice", abstain_below=1.5)
        assert "asked_at: 'someday' is not a time" in await error(
            s, "search_memory", query="Alice", asked_at="someday"
        )
        every = facts(
            await call(s, "search_memory", query="Where does Alice live?", include_closed=True)
        )
        assert {(h["object"], h["status"]) for h in every} == {
            ("Berlin", "current"),
            ("Paris", "closed"),
        }
        then = await call(s, "facts_as_of", subject="Alice", valid_at="2021-01-01T00:00:00Z")
        assert objects(then) == ["Paris"] and then["items"][0]["status"] == "current"
        assert objects(await call(s, "facts_as_of", subject="Alice", valid_at="2021")) == ["Paris"]
        history = await call(s, "fact_history", subject="Alice", predicate="LIVES_IN")
        assert set(objects(history)) == {"Paris", "Berlin"}
        closed = next(f for f in history["items"] if f["object"] == "Paris" and f["valid_to"])
        assert closed["closed_by_episode_id"] == added["episode_id"]
        assert closed["valid_to"] == "2022-06-01T00:00:00Z"
        why = await call(s, "why", fact_id=closed["id"])
        assert added["episode_id"] in {e["id"] for e in why["episodes"]}
        assert why["fact"]["object"] == "Paris" and why["fact"]["status"] == "closed"
        assert (await call(s, "get_fact", fact_id=closed["id"]))["valid_to"] == closed["valid_to"]
        episodes = (await call(s, "list_episodes"))["items"]
        assert added["episode_id"] in {e["id"] for e in episodes}
        entities = (await call(s, "search_entities", query="Alice"))["hits"]
        assert "Alice" in {h.get("name") for h in entities}
        plan = await call(s, "rollback_episode", episode_id=added["episode_id"])
        assert plan["applied"] is False
        assert {c["object"] for c in plan["removed"]} == {"Paris", "Berlin"}
        # The write role stops here.
        assert "admin" in await error(
            s, "rollback_episode", episode_id=added["episode_id"], dry_run=False
        )
        assert "admin" in await error(s, "forget", subject="Alice", dry_run=False, confirm="Alice")
        # The HTTP API's models: the same refusals, one line each.
        number = "is a number, not a time"
        assert number in await error(
            s,
            "add_memory",
            source="facts",
            facts=[{"subject": "A", "predicate": "LIVES_IN", "object": "B", "valid_at": 2021}],
        )
        assert "source" in await error(s, "add_memory", source="gossip", content="x")
        # The SDK's own check of the schema (types, bounds) answers in one line too.
        assert "limit" in await error(s, "search_memory", query="Alice", limit=0)
        assert "fact_id" in await error(s, "why", fact_id=["not", "a", "string"])
        # A misspelt filter is refused, not dropped (which would answer every fact).
        assert "subjet: unknown argument; facts_as_of takes include_contested" in await error(
            s, "facts_as_of", subjet="Alice"
        )
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
        assert objects(await call(s, "facts_as_of", subject="Alice"))  # reads are fine


async def test_admin_tools(served: Served) -> None:
    async with mcp_http(served, served.key("alice", "admin")) as s:
        poison = await call(
            s,
            "add_memory",
            source="facts",
            reference_time="2024-01-01",
            facts=[{"subject": "Alice", "predicate": "LIVES_IN", "object": "Mars"}],
        )
        assert objects(await call(s, "facts_as_of", subject="Alice")) == ["Mars"]
        undone = await call(s, "rollback_episode", episode_id=poison["episode_id"], dry_run=False)
        assert undone["applied"] and [c["object"] for c in undone["restored"]] == ["Berlin"]
        await call(
            s,
            "add_memory",
            source="facts",
            facts=[{"subject": "Eve", "predicate": "WORKS_AT", "object": "Evil Corp"}],
        )
        first = await call(s, "list_episodes", limit=1)
        second = await call(s, "list_episodes", limit=1, cursor=first["next_cursor"])
        assert first["next_cursor"] and first["items"][0]["id"] != second["items"][0]["id"]
        assert "cursor" in await error(s, "list_episodes", cursor="not-a-cursor")
        assert "confirm" in await error(s, "forget", subject="Eve", dry_run=False, confirm="yes")
        preview = await call(s, "forget", subject="Eve")  # a dry run by default
        assert preview["dry_run"] and preview["episodes_deleted"] == 1
        assert objects(await call(s, "facts_as_of", subject="Eve")) != []
        receipt = await call(s, "forget", subject="Eve", dry_run=False, confirm="Eve")
        assert receipt["subject"] == "Eve" and receipt["episodes_deleted"] == 1
        assert objects(await call(s, "facts_as_of", subject="Eve")) == []
        text = await call(s, "add_memory", content="Alice prefers window seats", extract=False)
        assert text["status"] == "added"
        hits = (await call(s, "search_memory", query="window seats"))["hits"]
        assert any(h["kind"] == "episode" and "window seats" in h["text"] for h in hits)
        # wait=false: queued at once, written by the server's background worker.
        queued = await call(
            s,
            "add_memory",
            source="facts",
            wait=False,
            facts=[{"subject": "Alice", "predicate": "WORKS_AT", "object": "Acme"}],
        )
        assert queued["status"] == "queued" and queued["facts_added"] == 0
        assert await eventually(s, "facts_as_of", subject="Alice", predicate="WORKS_AT")


async def test_old_argument_names_still_work_with_a_note(served: Served) -> None:
    """forget(entity, confirm), rollback_episode(apply) and search_memory(include_history),
    the names before the shared vocabulary, keep working one release, noted in the reply."""
    async with mcp_http(served, served.key("alice", "admin")) as s:
        added = await call(
            s,
            "add_memory",
            source="facts",
            facts=[{"subject": "Olaf", "predicate": "LIVES_IN", "object": "Oslo"}],
        )
        plan = await call(s, "rollback_episode", episode_id=added["episode_id"], apply=False)
        assert plan["applied"] is False and "use 'dry_run'" in plan["notes"][0]
        found = await call(s, "search_memory", query="Olaf Oslo", include_history=True)
        assert facts(found) and "use 'include_closed'" in found["notes"][0]
        preview = await call(s, "forget", entity="Olaf")
        assert preview["dry_run"] and "use 'subject'" in preview["notes"][0]
        assert (await call(s, "forget", subject="Olaf"))["notes"] == []
        gone = await call(s, "forget", entity="Olaf", confirm="Olaf")  # as before: erases
        assert not gone["dry_run"] and gone["episodes_deleted"] == 1


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
        fact_id = (await call(a, "facts_as_of", subject="Alice", predicate="KNOWS"))["items"][0][
            "id"
        ]
    async with mcp_http(served, served.key("bob", "admin")) as b:
        await call(
            b,
            "add_memory",
            source="facts",
            facts=[{"subject": "Bob", "predicate": "LIVES_IN", "object": "Rome"}],
        )
        found = await call(b, "search_memory", query="Alice Zed Berlin Paris", include_closed=True)
        assert "Alice" not in json.dumps(found)
        assert (await call(b, "search_entities", query="Alice"))["hits"] == []
        assert objects(await call(b, "facts_as_of", subject="Alice")) == []
        assert objects(await call(b, "facts_as_of", object="Zed")) == []
        assert objects(await call(b, "fact_history", subject="Alice")) == []
        assert {f["subject"] for f in (await call(b, "fact_history"))["items"]} == {"Bob"}
        assert mine["episode_id"] not in json.dumps(await call(b, "list_episodes", limit=100))
        for text in (
            await error(b, "why", fact_id=fact_id),
            await error(b, "get_fact", fact_id=fact_id),
            await error(b, "rollback_episode", episode_id=mine["episode_id"]),
            await error(b, "rollback_episode", episode_id=mine["episode_id"], dry_run=False),
            await error(b, "forget", subject="Alice", dry_run=False, confirm="Alice"),
        ):
            assert "not found" in text and "'bob'" in text
        made_up = await error(b, "why", fact_id="0" * 36)
        assert made_up.replace("0" * 36, fact_id) == await error(b, "why", fact_id=fact_id)
    async with mcp_http(served, served.key("alice", "read")) as a:
        assert objects(await call(a, "facts_as_of", subject="Alice", predicate="KNOWS")) == ["Zed"]


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
    async with mcp_stdio(home, "--group", "carol") as s:
        assert {t.name for t in (await s.list_tools()).tools} == TOOLS
        added = await call(s, "add_memory", source="facts", facts=paris_then_berlin())
        assert added["facts_added"] == 2
        assert "Berlin" in {
            h["object"] for h in facts(await call(s, "search_memory", query="Alice live"))
        }
        assert objects(
            await call(s, "facts_as_of", subject="Alice", valid_at="2021-01-01T00:00:00Z")
        ) == ["Paris"]
        assert "admin" in await error(s, "forget", subject="Alice", dry_run=False, confirm="Alice")
        queued = await call(
            s,
            "add_memory",
            source="facts",
            wait=False,
            facts=[{"subject": "Dana", "predicate": "WORKS_AT", "object": "Acme"}],
        )
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


def test_a_call_in_the_new_names_is_not_marked_deprecated(served: Served) -> None:
    """The tools speak the request models' new names (dry_run, subject, include_closed):
    only a caller's own old name marks the answer (a note in the reply, and over HTTP the
    `Deprecation` header the API's middleware adds)."""

    def tool_call(name: str, arguments: dict[str, Any]) -> httpx.Response:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        with served.client("alice", "admin") as c:
            return c.post(
                "/mcp",
                json=body,
                headers={
                    "Accept": "application/json, text/event-stream",
                    "MCP-Protocol-Version": "2025-06-18",
                },
            )

    for name, arguments in (
        ("rollback_episode", {"episode_id": "0" * 36}),
        ("forget", {"subject": "Nobody"}),
        ("search_memory", {"query": "Alice", "include_closed": True}),
    ):
        r = tool_call(name, arguments)
        assert r.status_code == 200, r.text
        assert "deprecation" not in r.headers, (name, r.headers.get("deprecation-note"))
    old = tool_call("search_memory", {"query": "Alice", "include_history": True})
    assert "use 'include_closed'" in old.text
