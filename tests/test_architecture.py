"""docs/architecture.md stays true: it names every module that exists and none that does not,
every dotted `kg.` name on the page resolves, and the contracts it quotes are pyproject's."""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
DOC = ROOT / "docs" / "architecture.md"
LISTED = re.compile(r"^- `(kg(?:\.\w+)*)`: \S", re.M)
DOTTED = re.compile(r"\bkg(?:\.\w+)+")


def tree_modules(root: Path = ROOT / "kg") -> set[str]:
    """Every module importable under kg, from the files (ingest/, retrieval/ and schemas/
    through the symlinks under kg/)."""
    found = set()
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        package = ".".join(Path(folder).relative_to(root.parent).parts)
        for name in files:
            if name.endswith(".py"):
                found.add(package if name == "__init__.py" else f"{package}.{name[:-3]}")
    return found


def listed_modules(text: str) -> list[str]:
    return LISTED.findall(text.split("\n## Modules\n", 1)[1])


def test_the_module_list_names_every_module_and_only_those() -> None:
    listed = listed_modules(DOC.read_text())
    assert len(listed) == len(set(listed)), "a module is listed twice"
    tree = tree_modules()
    assert {"kg.ingest.timeline", "kg.retrieval.fusion", "kg.schemas.store"} <= tree
    missing, stale = sorted(tree - set(listed)), sorted(set(listed) - tree)
    assert not missing, f"docs/architecture.md does not name {missing}"
    assert not stale, f"docs/architecture.md names modules that do not exist: {stale}"


def test_a_new_or_removed_module_is_noticed(tmp_path: Path) -> None:
    (tmp_path / "kg" / "sub").mkdir(parents=True)
    for path in ("kg/__init__.py", "kg/a.py", "kg/sub/__init__.py", "kg/sub/b.py"):
        (tmp_path / path).write_text("")
    (tmp_path / "kg" / "sub" / "__pycache__").mkdir()
    (tmp_path / "kg" / "sub" / "__pycache__" / "c.py").write_text("")
    assert tree_modules(tmp_path / "kg") == {"kg", "kg.a", "kg.sub", "kg.sub.b"}
    page = "## Modules\n\n- `kg.a`: one job.\n- `kg.sub`: x\nnot a `kg.sub.b`: line\n"
    assert listed_modules("intro\n" + page) == ["kg.a", "kg.sub"]


def test_every_dotted_name_on_the_page_resolves() -> None:
    tree = tree_modules()
    for name in sorted(set(DOTTED.findall(DOC.read_text()))):
        parts = name.split(".")
        cut = max(i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in tree)
        if cut == len(parts):
            continue  # a module: its file exists (importing kg.cli.__main__ would run kg)
        obj: object = importlib.import_module(".".join(parts[:cut]))
        for attr in parts[cut:]:
            assert hasattr(obj, attr), f"docs/architecture.md names {name}: no {attr}"
            obj = getattr(obj, attr)


def test_the_quoted_contracts_are_pyprojects() -> None:
    quoted = re.findall(r"^```toml\n(.*?)^```", DOC.read_text(), re.S | re.M)
    assert len(quoted) == 1
    assert quoted[0].count("[[tool.importlinter.contracts]]") == 4
    assert quoted[0] in (ROOT / "pyproject.toml").read_text()


def test_readme_and_design_decisions_link_here() -> None:
    assert "](docs/architecture.md)" in (ROOT / "README.md").read_text()
    assert "](architecture.md)" in (ROOT / "docs" / "design-decisions.md").read_text()
