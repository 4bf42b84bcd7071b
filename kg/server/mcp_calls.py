"""One MCP tool call: who is calling (the key over HTTP, the flag over stdio), against the
server's `Memory`, timed for /metrics and counted in the caller's group, every failure a
one-line `ToolError`. The tools (kg.server.tools) are plain module-level functions that
reach all of this through their `Context`."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import Tool
from pydantic import BaseModel, ValidationError

from kg.errors import KGError, NotFoundError
from kg.schemas.validation import validation_message
from kg.server.keys import Principal, redact_keys
from kg.server.metrics import ServerMetrics
from kg.server.service import Memory, Scoped

PRINCIPAL = "kg_principal"  # where McpAuth leaves the caller in the request scope

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
Ctx = Context[Any, Any]


class KgServer(MCPServer[Any]):
    """The SDK's server, holding what every tool call needs: the `Memory` (a callable: the
    HTTP app opens it at startup, after the tools are registered), the metrics, and for
    stdio the one principal every call is bound to."""

    def __init__(
        self,
        memory: Callable[[], Memory],
        *,
        instructions: str,
        metrics: ServerMetrics | None = None,
        fixed: Principal | None = None,
        tools: list[Tool] | None = None,
    ) -> None:
        super().__init__(
            "kg", instructions=instructions, version="0.1.0", log_level="WARNING", tools=tools
        )
        self.memory = memory
        self.meter = metrics or ServerMetrics()
        self.fixed = fixed
        self.described: object = None  # the ontology the instructions were written for
        # Per tool: the arguments it reads (old names included) and those its schema shows.
        self.arguments = {
            t.name: (
                {f.alias or n for n, f in t.fn_metadata.arg_model.model_fields.items()},
                sorted(t.parameters.get("properties", {})),
            )
            for t in tools or []
        }

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Ctx | None = None
    ) -> Any:
        """The SDK's call, with its own argument check (types, bounds) answering in one line
        as the request models do, not pydantic's multi-line report; an argument the tool
        does not take is refused (the SDK would drop it, and a misspelt filter would widen
        the answer), as the HTTP API refuses unknown fields."""
        accepted, shown = self.arguments.get(name, (None, []))
        unknown = sorted(set(arguments) - accepted) if accepted is not None else []
        if unknown:
            raise ToolError(
                f"invalid arguments: {unknown[0]}: unknown argument; {name} takes "
                f"{', '.join(shown) or 'none'}"
            )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError) and not isinstance(
                exc, UnexpectedToolError
            ):
                raise ToolError(f"invalid arguments: {validation_message(exc.__cause__)}") from None
            raise

    def describe(self, ontology: object, instructions: str) -> None:
        """Instructions for this ontology. The SDK reads them at each session's start and
        offers no setter, hence its attribute (the HTTP app's ontology is known only once
        the store is open, after the tools are registered)."""
        self.described = ontology
        self._lowlevel_server.instructions = instructions


def principal_of(ctx: Ctx, fixed: Principal | None) -> Principal:
    """The caller: bound by flag over stdio, by the key over HTTP (see kg.server.app.McpAuth)."""
    if fixed is not None:
        return fixed
    request = ctx.request_context.request
    found = getattr(request, "scope", {}).get("state", {}).get(PRINCIPAL)
    if not isinstance(found, Principal):
        raise ToolError("no API key on this request")
    return found


def server_of(ctx: Ctx) -> KgServer:
    server = ctx.mcp_server
    if not isinstance(server, KgServer):  # a tool registered on a foreign server
        raise ToolError("this tool runs on kg's MCP server only")
    return server


async def run_tool(name: str, ctx: Ctx, work: Callable[[Scoped], Awaitable[T]]) -> T:
    """One tool call: timed for /metrics, and counted in the caller's group (kg stats)."""
    server = server_of(ctx)
    start = time.perf_counter()
    s: Scoped | None = None
    failed = True
    with server.meter.tool(name):
        try:
            s = server.memory().scoped(principal_of(ctx, server.fixed))
            result = await work(s)
            failed = False
            return result
        except NotFoundError as exc:
            raise ToolError(redact_keys(f"not found: {exc}")) from None
        except KGError as exc:
            raise ToolError(redact_keys(" ".join(str(exc).split()))) from None
        finally:
            if s is not None:
                s.kg.record_call(s.group, "tool", name, time.perf_counter() - start, error=failed)


def checked(model: type[M], data: dict[str, Any]) -> M:
    """`data` through one of the HTTP API's request models (kg.server.models): the same
    input is refused with the same one-line message on both surfaces."""
    try:
        return model.model_validate({k: v for k, v in data.items() if v is not None})
    except ValidationError as exc:
        raise ToolError(f"invalid arguments: {validation_message(exc)}") from None
