"""The MCP surface as a model sees it: every tool's name, title, description, input and output
schema and annotations, the resources and the prompts, as `tests/golden/mcp_tools.json`.

tests/test_mcp_golden.py fails when the server's differs from the file, so a changed
description or schema is a reviewed diff, never an accident. After a deliberate change:

    .venv/bin/python -m tests.mcp_golden
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from kg.server.mcp import build_mcp
from kg.server.service import Memory, ShuttingDownError

GOLDEN = Path(__file__).parent / "golden" / "mcp_tools.json"


def _no_memory() -> Memory:
    raise ShuttingDownError("not needed to list the tools")


async def _surface() -> dict[str, Any]:
    server = build_mcp(_no_memory)

    def dump(items: list[Any]) -> list[dict[str, Any]]:
        return [i.model_dump(mode="json", by_alias=True, exclude_none=True) for i in items]

    return {
        "instructions": server.instructions,
        "tools": dump(await server.list_tools()),
        "resources": dump(await server.list_resources()),
        "prompts": dump(await server.list_prompts()),
    }


def surface() -> dict[str, Any]:
    """What the server advertises now (with the default ontology), as JSON data."""
    return asyncio.run(_surface())


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    GOLDEN.write_text(render(surface()))
    print(
        f"wrote {GOLDEN.relative_to(Path.cwd()) if GOLDEN.is_relative_to(Path.cwd()) else GOLDEN}"
    )


if __name__ == "__main__":
    main()
