"""The layering in pyproject's [tool.importlinter] holds: CLI > facade > operations >
ingest | retrieval | backends > errors, clock > schemas, and only the backends reach a database.

Import-linter reads the package that is imported (kg/ingest, kg/retrieval and kg/schemas are
the top-level folders, through the symlinks), so this checks the one-import-root layout.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kg

ROOT = Path(__file__).parents[1]


def test_every_import_keeps_to_its_layer() -> None:
    # In a process of its own: lint_imports reconfigures logging, which would silence kg's.
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command as c; c()",
            "--no-cache",
            "--no-logo",
            str(ROOT / "pyproject.toml"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 kept, 0 broken" in run.stdout  # every contract ran
    # The layers were read from the tree that is imported, symlinked folders included.
    assert Path(kg.__file__).parent == ROOT / "kg"
    assert (ROOT / "kg" / "ingest").resolve() == ROOT / "ingest"
