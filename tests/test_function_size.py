"""No function under kg/ (ingest/, retrieval/ and schemas/ included) is longer than 80 lines,
from its `def` to its last line, docstring included: past that, a function holds more than
one job. The few longer ones that predate the rule are listed with their length, and may only
shrink: a listed one that grows fails, and so does one that has shrunk to the limit (drop it
from the list)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(__file__).parents[1]
MOST = 80
# module:function -> its length when the rule came in. Shrink them; never add one.
LONGER: dict[str, int] = {}


def function_lengths(root: Path = ROOT / "kg") -> dict[str, int]:
    """Every function and method (nested ones too) as module:qualified.name -> lines."""
    found: dict[str, int] = {}
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        package = ".".join(Path(folder).relative_to(root.parent).parts)
        for name in (f for f in files if f.endswith(".py")):
            module = package if name == "__init__.py" else f"{package}.{name[:-3]}"
            tree = ast.parse((Path(folder) / name).read_text())
            stack: list[tuple[ast.AST, str]] = [(tree, "")]
            while stack:
                node, prefix = stack.pop()
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                        qualified = f"{prefix}{child.name}"
                        if not isinstance(child, ast.ClassDef):
                            end = child.end_lineno or child.lineno
                            found[f"{module}:{qualified}"] = end - child.lineno + 1
                        stack.append((child, f"{qualified}."))
    return found


def test_no_function_is_longer_than_80_lines() -> None:
    lengths = function_lengths()
    assert "kg.facade:KG.add_episode" in lengths  # the walk sees methods
    assert "kg.ingest.structured:planning_names" in lengths  # and follows the symlinks
    too_long = {f: n for f, n in lengths.items() if n > MOST and f not in LONGER}
    assert not too_long, f"over {MOST} lines (split them): {too_long}"


def test_the_longer_functions_only_shrink() -> None:
    lengths = function_lengths()
    for name, was in LONGER.items():
        assert name in lengths, f"{name} is gone: drop it from LONGER"
        now = lengths[name]
        assert now <= was, f"{name} grew from {was} to {now} lines: split it instead"
        assert now > MOST, f"{name} is down to {now} lines: drop it from LONGER"
