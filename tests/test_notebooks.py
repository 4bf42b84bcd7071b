"""The notebooks run top to bottom offline, and show what they claim to show."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import nbclient
import nbformat

NOTEBOOKS = Path(__file__).parents[1] / "notebooks"


def run(name: str, env: dict[str, str] | None = None) -> list[Any]:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    old = dict(os.environ)
    os.environ.update(env or {})
    try:
        where = {"metadata": {"path": str(NOTEBOOKS)}}
        nbclient.NotebookClient(nb, timeout=900, kernel_name="python3", resources=where).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    return [c for c in nb.cells if c.cell_type == "code"]


def text(cells: list[Any]) -> str:
    return "\n".join(
        o.get("text", "") or o.get("data", {}).get("text/plain", "")
        for c in cells
        for o in c.outputs
    )


def test_quickstart_supersedes_answers_march_and_rolls_back() -> None:
    out = text(run("quickstart.ipynb"))
    assert "now: Minji LIVES_IN Busan since 2024-05-29" in out
    assert "[('LIVES_IN', 'Seoul'), ('WORKS_AT', 'Naver')]" in out  # what was true in March
    assert "[['Minji', 'LIVES_IN', 'Seoul'], ['Minji', 'WORKS_AT', 'Naver']]" in out  # Cypher
    assert "['Jeju']" in out and "now: ['Busan']" in out  # poisoned, then rolled back


def test_retrieval_notebook_measures_and_plots() -> None:
    # Every method and both plots, on fewer questions: recall figures are the benchmark's job.
    small = {"KG_NB_QUESTIONS": "40", "KG_NB_SIZES": "1000 3000", "KG_NB_QUERIES": "20"}
    cells = run("retrieval.ipynb", small)
    out = text(cells)
    for method in ("episodes_bm25", "episodes_cosine", "episodes_hybrid", "facts:facts_hybrid"):
        assert method in out
    assert "3,000 facts: search p50" in out and "; 40 questions" in out
    images = [o for c in cells for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2  # recall@k and latency plots
