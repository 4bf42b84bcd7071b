"""docs/cli.md is the CLI's own help, rendered: a changed flag or help text must change it too."""

from __future__ import annotations

from pathlib import Path

from kg.cli.app import app
from kg.cli.reference import render

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_cli_reference_is_current() -> None:
    assert DOC.read_text() == render(app), (
        "docs/cli.md differs from the commands' help: run "
        "`python -m kg.cli.reference > docs/cli.md` and commit it"
    )


def test_cli_reference_names_every_command_and_option() -> None:
    page = render(app)
    for command in ("`kg search`", "`kg keys create`", "`kg communities build`", "`kg erase`"):
        assert command in page
    assert "`--valid-at`" in page and "(env `KG_HOME`)" in page
    assert "`--as-of`" not in page  # hidden: the old name of --valid-at
    assert "`--help`" not in page  # click's own option is not documented as kg's
