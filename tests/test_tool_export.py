"""`kg tools --format`: kg's MCP tools as OpenAI and Anthropic tool definitions, taken from the
list the MCP server advertises, so the three cannot drift apart."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import jsonschema
import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionToolParam
from pydantic import TypeAdapter
from typer.testing import CliRunner

from kg.cli.app import app
from kg.server.tool_export import exported, mcp_tools


async def test_every_format_carries_the_mcp_tools_names_descriptions_and_schemas() -> None:
    mcp = await mcp_tools()
    assert {t["name"] for t in mcp} >= {"add_memory", "search_memory", "forget"}
    openai, responses = await exported("openai"), await exported("openai-responses")
    anthropic = await exported("anthropic")
    for m, o, r, a in zip(mcp, openai, responses, anthropic, strict=True):
        assert o["function"]["name"] == r["name"] == a["name"] == m["name"]
        assert o["function"]["description"] == a["description"] == m["description"]
        assert o["function"]["parameters"] == r["parameters"] == a["input_schema"]
        assert a["input_schema"] == m["inputSchema"]


async def test_openai_tools_go_through_the_real_client_and_its_calls_fit_the_schema() -> None:
    """The real `openai` client sends the definitions as given, and a tool call a model makes
    against them validates against the tool's own schema."""
    tools = await exported("openai")
    adapter: TypeAdapter[ChatCompletionToolParam] = TypeAdapter(ChatCompletionToolParam)
    for t in tools:
        adapter.validate_python(t)
    sent: list[dict[str, Any]] = []
    call = {"query": "where does Minji live", "valid_at": "2021"}

    def reply(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "search_memory", "arguments": json.dumps(call)},
                }
            ],
        }
        return httpx.Response(
            200,
            json={
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            },
        )

    transport = httpx.AsyncClient(transport=httpx.MockTransport(reply))
    client = AsyncOpenAI(api_key="k", base_url="http://llm.invalid/v1", http_client=transport)
    answer = await client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        tools=tools,  # type: ignore[arg-type]
    )
    assert sent[0]["tools"] == tools
    made = answer.choices[0].message.tool_calls
    assert made is not None and made[0].type == "function"
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    jsonschema.validate(json.loads(made[0].function.arguments), by_name[made[0].function.name])
    with pytest.raises(jsonschema.ValidationError):  # the schema is a real constraint
        jsonschema.validate({"limit": "many"}, by_name["search_memory"])


async def test_anthropic_tools_follow_the_messages_api_rules() -> None:
    for t in await exported("anthropic"):
        assert set(t) == {"name", "description", "input_schema"}
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", t["name"])
        assert t["input_schema"]["type"] == "object"
        jsonschema.Draft202012Validator.check_schema(t["input_schema"])


def test_the_cli_prints_them_and_refuses_an_unknown_format() -> None:
    printed = CliRunner().invoke(app, ["tools", "--format", "anthropic"])
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.output) == asyncio.run(exported("anthropic"))
    refused = CliRunner().invoke(app, ["tools", "--format", "gemini"])
    assert refused.exit_code == 1 and "unknown tool format 'gemini'" in refused.output
