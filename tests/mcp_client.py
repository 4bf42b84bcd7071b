"""The official MCP Python client against a real kg: streamable HTTP at /mcp of a `kg serve`
(keyed), or stdio against a `kg mcp` subprocess (one group bound by flag)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.served import ROOT, Served, kg_command, kg_env


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


@asynccontextmanager
async def mcp_stdio(home: Path, *flags: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=kg_command()[0],
        args=[*kg_command()[1:], "mcp", *flags],
        env=kg_env(home),
        cwd=str(ROOT),
    )
    async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as s:
        await s.initialize()
        yield s


async def call(s: ClientSession, tool: str, **args: Any) -> Any:
    """A tool's structured reply (every kg tool has an output schema)."""
    r = await s.call_tool(tool, args)
    assert not r.is_error, r.content
    assert r.structured_content is not None, f"{tool}: no structured content"
    return r.structured_content


async def error(s: ClientSession, tool: str, **args: Any) -> str:
    """A refused call's message: one line, no traceback."""
    r = await s.call_tool(tool, args)
    assert r.is_error, r
    text: str = r.content[0].text  # type: ignore[union-attr]
    assert "Traceback" not in text and "\n" not in text
    return text


def facts(hits: dict[str, Any]) -> list[dict[str, Any]]:
    """The fact hits of a search_memory reply."""
    return [h for h in hits["hits"] if h["kind"] == "fact"]


async def eventually(s: ClientSession, tool: str, **args: Any) -> list[Any]:
    """The tool's items once there are some (a queued episode written by the worker)."""
    for _ in range(300):
        found: list[Any] = (await call(s, tool, **args))["items"]
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"{tool} {args}: still nothing after 30 s")
