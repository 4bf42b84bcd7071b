"""The linters run with the tests, so they cannot silently regress: `ruff check`, `ruff format
--check` and `mypy` (strict, on kg/) from this venv, each failing the run with its own output.
`.ci/run` runs exactly the README's test command, so CI runs them too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
BIN = Path(sys.executable).parent  # the venv's tools: the versions the dev extra pins


@pytest.mark.parametrize(
    "command",
    [["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"]],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_linter_is_clean(command: list[str]) -> None:
    tool = BIN / command[0]
    assert tool.exists(), f"{tool} is missing: install the dev extra (pip install -e '.[dev]')"
    done = subprocess.run(
        [str(tool), *command[1:]], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}"
