"""Every ```python block of the README and docs/python.md runs on its own and prints what its
comments say.

Each block runs in a fresh interpreter with a KG_HOME of its own (the embedded FalkorDB), so
a block that leans on a variable or a graph from another block fails here. A line
`print(...)  # OUTPUT` promises that OUTPUT is printed: the promised lines must appear in the
output, in order (a comment that starts with "e.g." is only an illustration). A block that
needs a live LLM says so on a line `# needs: llm` and is skipped, with that reason: the suite
runs offline.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[1]
PAGES = (ROOT / "README.md", ROOT / "docs" / "python.md")
NEEDS = re.compile(r"^\s*# needs: (.+)$", re.M)
PROMISE = re.compile(r"^\s*print\(.*\)\s+# (?!e\.g\.)(.+)$", re.M)


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


def promised(block: str) -> list[str]:
    return [m.strip() for m in PROMISE.findall(block)]


def in_order(wanted: list[str], lines: list[str]) -> bool:
    rest = iter(lines)
    return all(any(line == w for line in rest) for w in wanted)


def examples() -> list[Any]:
    return [
        pytest.param(page.name, i, block, id=f"{page.name}-{i}")
        for page in PAGES
        for i, block in enumerate(python_blocks(page.read_text()), start=1)
    ]


def test_readme_has_python_examples() -> None:
    blocks = [p.values[2] for p in examples()]
    assert len(python_blocks(PAGES[0].read_text())) >= 1 and len(blocks) >= 3
    assert all(promised(b) for b in blocks)  # every example says what it prints


def test_promises_are_read_in_order() -> None:
    block = 'x = 1\nprint(x)  # 1\nprint("a b")  # a b\nprint(y)  # e.g. 3\n'
    assert promised(block) == ["1", "a b"]
    assert in_order(["1", "a b"], ["1", "noise", "a b"])
    assert not in_order(["1", "a b"], ["a b", "1"])
    assert not in_order(["1"], ["12"])
    needs = NEEDS.search("import kg\n# needs: llm (an OpenAI-compatible endpoint)\n")
    assert needs is not None and needs.group(1) == "llm (an OpenAI-compatible endpoint)"


@pytest.mark.parametrize(("page", "index", "block"), examples())
def test_readme_example_runs(page: str, index: int, block: str, tmp_path: Path) -> None:
    if needs := NEEDS.search(block):
        pytest.skip(f"{page} example {index} needs {needs.group(1)}; the suite runs offline")
    env = {**os.environ, "KG_HOME": str(tmp_path / "kg-home")}
    for var in ("KG_URI", "KG_GROUP", "KG_EMBEDDER", "KG_ONTOLOGY"):
        env.pop(var, None)
    run = subprocess.run(
        [sys.executable, "-c", block],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert run.returncode == 0, f"{page} example {index} failed:\n{run.stderr[-3000:]}"
    lines = [line.strip() for line in run.stdout.splitlines()]
    wanted = promised(block)
    assert in_order(wanted, lines), f"{page} example {index} promised {wanted}, printed {lines}"
