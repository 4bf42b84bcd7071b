"""kg's MCP tools as other frameworks' tool definitions (`kg tools --format`): an agent built
on the OpenAI or Anthropic SDK gets the same tools, names, descriptions and argument schemas
an MCP client does, from the one list the MCP server advertises (so they cannot drift), and
calls them through kg's HTTP API or its own MCP session."""

from __future__ import annotations

from typing import Any, Literal, get_args

from kg.errors import InputError, KGError
from kg.server.mcp import build_mcp

ToolFormat = Literal["mcp", "openai", "openai-responses", "anthropic"]
FORMATS: tuple[ToolFormat, ...] = get_args(ToolFormat)


def _no_memory() -> Any:
    # What the server's memory raises before it opens: the tools then describe the default
    # ontology, which is what a definition exported without a store can name.
    raise KGError("listing tools needs no store")


async def mcp_tools() -> list[dict[str, Any]]:
    """The tools exactly as the MCP server lists them (name, description, schemas, hints)."""
    tools = await build_mcp(_no_memory).list_tools()
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]


def convert(tool: dict[str, Any], fmt: ToolFormat) -> dict[str, Any]:
    """One MCP tool in `fmt`: OpenAI Chat Completions (`openai`), the Responses API and the
    Agents SDK (`openai-responses`), or Anthropic's Messages API (`anthropic`)."""
    name, description, schema = tool["name"], tool.get("description", ""), tool["inputSchema"]
    if fmt == "openai":
        return {
            "type": "function",
            "function": {"name": name, "description": description, "parameters": schema},
        }
    if fmt == "openai-responses":
        return {"type": "function", "name": name, "description": description, "parameters": schema}
    if fmt == "anthropic":
        return {"name": name, "description": description, "input_schema": schema}
    return tool


async def exported(fmt: str) -> list[dict[str, Any]]:
    """The tools in `fmt`, checked here once for every caller (the CLI passes its flag as is)."""
    if fmt not in FORMATS:
        raise InputError(f"unknown tool format {fmt!r}: use one of {', '.join(FORMATS)}")
    return [convert(t, fmt) for t in await mcp_tools()]
