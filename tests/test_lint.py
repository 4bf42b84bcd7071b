"""The linters run with the tests, so they cannot silently regress: `ruff check`, `ruff format
--check` and `mypy` (strict, on kg/) from this venv, each failing the run with its own output.
`.ci/run` runs exactly the README's test command, so CI runs them too.

mypy on a cold cache (a clean checkout, as in CI) takes minutes, so the linters are started
as soon as the run is collected (tests/conftest.py), beside the other tests, and each test
here only waits for its own: the suite is not longer by their time."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import pytest

ROOT = Path(__file__).parents[1]
BIN = Path(sys.executable).parent  # the venv's tools: the versions the dev extra pins
LINTERS = {
    "ruff-check": ["ruff", "check", "."],
    "ruff-format": ["ruff", "format", "--check", "."],
    "mypy": ["mypy"],
}
_running: dict[str, tuple[subprocess.Popen[bytes], IO[bytes]]] = {}


def start(names: Iterable[str]) -> None:
    """Start these linters, unless started already or missing (their test says so)."""
    for name in names:
        command = LINTERS[name]
        if name not in _running and (BIN / command[0]).exists():
            out = tempfile.TemporaryFile()  # noqa: SIM115 (closed by the test, or by stop)
            process = subprocess.Popen(
                [str(BIN / command[0]), *command[1:]],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            _running[name] = (process, out)


def stop() -> None:
    """End the linters a run started and never waited for (it was interrupted)."""
    while _running:
        process, out = _running.popitem()[1]
        process.kill()
        process.wait()
        out.close()


@pytest.mark.parametrize("name", list(LINTERS))
def test_linter_is_clean(name: str) -> None:
    command = LINTERS[name]
    tool = BIN / command[0]
    assert tool.exists(), f"{tool} is missing: install the dev extra (pip install -e '.[dev]')"
    start([name])
    process, out = _running.pop(name)
    with out:
        code = process.wait()
        out.seek(0)
        output = out.read().decode(errors="replace")
    assert code == 0, f"{' '.join(command)} failed:\n{output}"


def test_the_formatter_decides_the_layout() -> None:
    """No comment that turns the formatter off for a line or a block (issue 25 item 7): hand
    layout that fights the formatter drifts from it, and a reader cannot tell a deliberate
    table from an old habit. A table that must stay one row a line keeps its shape with a
    trailing comma."""
    markers = ("fmt" + ": skip", "fmt" + ": off")  # not spelled out: this file would match
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("kg", "ingest", "retrieval", "schemas", "tests", "benchmarks", "docker")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if not path.is_symlink() and ".venv" not in path.parts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if any(m in line for m in markers)
    ]
    assert not found, f"formatter markers (remove them; let ruff format decide): {found}"
