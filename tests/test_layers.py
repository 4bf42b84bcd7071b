"""The layering in pyproject's [tool.importlinter] holds: CLI > facade > operations >
ingest | retrieval | backends > errors, clock > schemas, and only the backends reach a database.

Import-linter reads the package that is imported (kg/ingest, kg/retrieval and kg/schemas are
the top-level folders, through the symlinks), so this checks the one-import-root layout.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from importlinter.cli import lint_imports

import kg

ROOT = Path(__file__).parents[1]


def test_every_import_keeps_to_its_layer(capsys: pytest.CaptureFixture[str]) -> None:
    code = lint_imports(str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    report = capsys.readouterr().out
    assert code == 0, report
    assert "3 kept, 0 broken" in report  # every contract ran
    # The layers were read from the tree that is imported, symlinked folders included.
    assert Path(kg.__file__).parent == ROOT / "kg"
    assert (ROOT / "kg" / "ingest").resolve() == ROOT / "ingest"
