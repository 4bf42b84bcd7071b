"""The MCP tools as a model reads them (names, descriptions, schemas, annotations) are kept in
tests/golden/mcp_tools.json: a drift fails here, naming what changed; a deliberate change is
regenerated with `python -m tests.mcp_golden` and reviewed as a diff."""

from __future__ import annotations

import json
from typing import Any

from tests.mcp_golden import GOLDEN, surface

REGENERATE = "regenerate with: .venv/bin/python -m tests.mcp_golden"


def _drift(kept: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs, one line each: a tool added, gone, or a field of it changed."""
    found = [f"{k} changed" for k in ("instructions",) if kept.get(k) != now.get(k)]
    for kind in ("tools", "resources", "prompts"):
        old = {t["name"]: t for t in kept.get(kind, [])}
        new = {t["name"]: t for t in now.get(kind, [])}
        found += [f"{kind}: {n} added" for n in sorted(new.keys() - old.keys())]
        found += [f"{kind}: {n} gone" for n in sorted(old.keys() - new.keys())]
        for name in sorted(old.keys() & new.keys()):
            fields = sorted(set(old[name]) | set(new[name]))
            found += [
                f"{kind}: {name}.{f} changed"
                for f in fields
                if old[name].get(f) != new[name].get(f)
            ]
    return found


def test_the_tools_match_the_golden_file() -> None:
    kept = json.loads(GOLDEN.read_text())
    drift = _drift(kept, surface())
    assert not drift, f"the MCP surface drifted from {GOLDEN.name}: {drift}; {REGENERATE}"


def test_every_tool_is_described_for_a_model() -> None:
    """What the golden file holds is itself what a model needs: prose descriptions, typed
    inputs, an output schema and annotations on every tool."""
    for tool in surface()["tools"]:
        name = tool["name"]
        assert len(tool["description"]) > 80, name
        assert "\n" not in tool["description"].replace("\n\n", ""), f"{name}: hard-wrapped"
        assert tool["outputSchema"]["type"] == "object", name
        assert "readOnlyHint" in tool["annotations"], name
        for arg, schema in tool["inputSchema"]["properties"].items():
            assert schema.get("description"), f"{name}.{arg}: no description"
            assert "group" not in arg, f"{name}.{arg}: the key decides the group"


# Second names for a concept of the shared vocabulary (docs/server.md): read for one release,
# never shown in a schema.
OLD_NAMES = {"include_history", "history", "entity", "apply", "as_of"}


def test_the_schemas_use_one_name_per_concept() -> None:
    for tool in surface()["tools"]:
        shown = set(tool["inputSchema"]["properties"])
        assert not shown & OLD_NAMES, f"{tool['name']}: {sorted(shown & OLD_NAMES)}"


def test_the_instructions_name_the_predicates_and_what_closes_what() -> None:
    text = surface()["instructions"]
    assert "LIVES_IN" in text and "kg://ontology" in text and "closes" in text
    assert "MOVED_TO" in text  # the trap: a predicate of its own closes nothing


def test_a_drift_is_named() -> None:
    kept = json.loads(GOLDEN.read_text())
    now = json.loads(GOLDEN.read_text())
    now["tools"][0]["description"] += " More."
    now["tools"].pop()
    assert _drift(kept, now) == [
        f"tools: {kept['tools'][-1]['name']} gone",
        f"tools: {kept['tools'][0]['name']}.description changed",
    ]
