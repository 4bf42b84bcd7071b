"""Trust by credential: the channel a write is stored on, and the highest trust it may claim,
come from the key (or `kg mcp --channel`), never from the request body. An agent's memory
tool never closes what the user said; a body claiming more than its key is refused (403)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from kg import KG
from kg.schemas.keys import KEYS_NAMESPACE
from kg.server.keys import authenticate, create_key
from kg.server.models import AddEpisode, Correction
from kg.server.service import ForbiddenError, Memory, Scoped
from kg.store.cypher.dialect import Statement
from tests.conftest import add, t
from tests.mcp_client import call, mcp_http
from tests.served import ROOT, kg_command, kg_env, serve
from tests.test_server_ops import kg_cli


def moved(city: str, year: int, **fields: Any) -> AddEpisode:
    return AddEpisode.model_validate(
        {
            "source": "facts",
            "reference_time": t(year),
            **fields,
            "facts": [{"subject": "Alice", "predicate": "LIVES_IN", "object": city}],
        }
    )


async def keyed(kg: KG, role: str, *channel: str) -> Scoped:
    """The scope a key made as `kg keys create` makes it (channel: its default, or given)
    stands for, through the same lookup every request makes."""
    _, key = await create_key(kg.store, "default", role, "", *channel)
    found = await authenticate(kg.store, key)
    assert found is not None
    return Memory(kg).scoped(found)


async def test_an_agent_key_never_closes_what_the_user_said(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Paris"))  # the user's own word
    agent = await keyed(kg, "write")  # a key made the default way
    r = await agent.add(moved("Berlin", 2023))
    [ep] = await kg.store.episodes("default", [r.episode_uuid])
    assert (ep.channel.value, ep.trust.name) == ("agent", "agent")
    assert [f.object for f in await kg.facts(subject="Alice")] == ["Paris"]
    # A correction through such a key is the agent's too: it closes nothing of the user's.
    [paris] = await kg.facts(subject="Alice")
    c = await agent.correct(paris.edge.uuid, Correction(object="Lyon", valid_at=t(2024)))
    [ep] = await kg.store.episodes("default", [c.episode_uuid])
    assert ep.channel.value == "agent"
    assert [f.object for f in await kg.facts(subject="Alice")] == ["Paris"]


async def test_the_body_cannot_claim_more_than_its_key(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Paris"))
    agent = await keyed(kg, "admin")  # the role is no ceiling: the channel is
    for claim in (
        {"channel": "document"},
        {"channel": "user"},
        {"trust": 3},
        {"channel": "agent", "trust": 1},
    ):
        with pytest.raises(ForbiddenError, match="at most at trust 'agent'"):
            await agent.add(moved("Rome", 2023, **claim))
    assert [f.object for f in await kg.facts(subject="Alice")] == ["Paris"]
    assert len(await kg.store.find_episodes("default", None, None)) == 1  # nothing stored
    # A key on the document channel may write lower (agent), not higher (tool, user).
    document = await keyed(kg, "write", "document")
    r = await document.add(moved("Oslo", 2023, channel="agent"))
    [ep] = await kg.store.episodes("default", [r.episode_uuid])
    assert (ep.channel.value, ep.trust.name) == ("agent", "agent")
    with pytest.raises(ForbiddenError, match="claims channel 'tool' at trust 'tool'"):
        await document.add(moved("Oslo", 2024, channel="tool"))
    # A user key writes at the user's trust by default: the move closes Paris.
    user = await keyed(kg, "write", "user")
    r = await user.add(moved("Berlin", 2024))
    [ep] = await kg.store.episodes("default", [r.episode_uuid])
    assert (ep.channel.value, ep.trust.name) == ("user", "user")
    assert [f.object for f in await kg.facts(subject="Alice")] == ["Berlin"]


async def test_keys_made_before_channels_read_as_agent(kg: KG) -> None:
    """A key record stored before keys had a channel (no `channel` property) still
    authenticates, at the lowest tier."""
    record, key = await create_key(kg.store, "default", "write")
    await kg.store.execute(  # type: ignore[attr-defined]
        KEYS_NAMESPACE,
        [
            Statement(
                "MATCH (k:ApiKey) WHERE k.key_id = $id SET k.channel = null", {"id": record.key_id}
            )
        ],
    )
    [legacy] = [k for k in await kg.store.keys() if k.key_id == record.key_id]
    assert legacy.channel.value == "agent"
    found = await authenticate(kg.store, key)
    assert found is not None and found.channel.value == "agent"


def test_over_http_and_mcp_the_key_decides(tmp_path: Path) -> None:
    """The finding, as an attacker tried it: a write key's MCP add_memory closed the user's
    fact (stored as user), and its body could claim `channel: document, trust: user`."""
    home = tmp_path / "home"
    made = kg_cli(
        home, "keys", "create", "--group", "g", "--role", "write", "--channel", "user", "--json"
    )
    assert made.returncode == 0, made.stderr
    user_key = json.loads(made.stdout)["key"]
    listed = kg_cli(home, "keys", "list", "--json")
    assert [k["channel"] for k in json.loads(listed.stdout)] == ["user"]
    bad = kg_cli(home, "keys", "create", "--group", "g", "--role", "write", "--channel", "boss")
    assert bad.returncode == 1 and "unknown channel 'boss'" in bad.stderr
    served = serve(home, [("g", "write")])
    try:
        with httpx.Client(base_url=served.url, timeout=60) as c:
            user = {"Authorization": f"Bearer {user_key}"}
            agent = {"Authorization": f"Bearer {served.key('g', 'write')}"}
            said = moved("Paris", 2020).model_dump(mode="json", exclude_none=True)
            assert c.post("/v1/episodes", json=said, headers=user).status_code == 201
            claim = {
                **moved("Rome", 2023).model_dump(mode="json", exclude_none=True),
                "channel": "document",
                "trust": 3,
            }
            r = c.post("/v1/episodes", json=claim, headers=agent)
            assert r.status_code == 403, r.text
            assert "at most at trust 'agent'" in r.json()["detail"]
            assert c.get("/v1/whoami", headers=agent).json()["channel"] == "agent"

        async def agent_remembers() -> list[dict[str, Any]]:
            async with mcp_http(served, served.key("g", "write")) as s:
                added = await call(
                    s,
                    "add_memory",
                    source="facts",
                    facts=[
                        {
                            "subject": "Alice",
                            "predicate": "LIVES_IN",
                            "object": "Berlin",
                            "valid_at": "2023-01-01T00:00:00Z",
                        }
                    ],
                )
                assert added["status"] == "added" and added["facts_closed"] == 0, added
                return list((await call(s, "fact_history", subject="Alice"))["items"])

        history = asyncio.run(agent_remembers())
        by_city = {f["object"]: f for f in history}
        assert by_city["Berlin"]["trust"] == "agent" and by_city["Berlin"]["status"] == "contested"
        assert by_city["Paris"]["known_to"] is None and by_city["Paris"]["valid_to"] is None
        with httpx.Client(base_url=served.url, headers=user, timeout=60) as c:
            now = c.get("/v1/facts", params={"subject": "Alice"}).json()["items"]
        assert [f["object"] for f in now] == ["Paris"]  # the user's word stands
    finally:
        served.stop()


@pytest.mark.parametrize(("flag", "stored"), [((), "agent"), (("--channel", "user"), "user")])
async def test_kg_mcp_stdio_channel_comes_from_its_flag(
    tmp_path: Path, flag: tuple[str, ...], stored: str
) -> None:
    params = StdioServerParameters(
        command=kg_command()[0],
        args=[*kg_command()[1:], "mcp", "--group", "carol", *flag],
        env=kg_env(tmp_path / "home"),
        cwd=str(ROOT),
    )
    async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as s:
        await s.initialize()
        dana = {"subject": "Dana", "predicate": "WORKS_AT", "object": "Acme"}
        await call(s, "add_memory", source="facts", facts=[dana])
        [fact] = (await call(s, "facts_as_of", subject="Dana"))["items"]
        [episode] = (await call(s, "list_episodes"))["items"]
    assert (episode["channel"], fact["trust"]) == (stored, stored)
