"""axe-core for the browser tests: from npm, kept in a local cache (as the Neo4j tests keep
their jars), installed by the tests themselves on first use (npm too, from Debian's archive, under
CI=true or KG_INSTALL_CHROMIUM=1, as the browser is). Not shipped with kg."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

VERSION = "4.10.2"
CACHE = Path(os.environ.get("KG_AXE_CACHE", Path.home() / ".cache" / "kg-axe-core")) / VERSION
INSTALLER = Path(__file__).resolve().parents[1] / "docker" / "chromium-dev" / "install"
SCRIPT = CACHE / "node_modules" / "axe-core" / "axe.min.js"


@functools.cache
def axe_source() -> str:
    """axe.min.js's text, installing it with npm into the cache the first time; without npm
    the test skips (under CI=true it fails), naming what is missing."""
    if not SCRIPT.exists():
        why = _install()
        if why:
            if os.environ.get("CI") == "true":
                pytest.fail(why)
            pytest.skip(why)
    return SCRIPT.read_text()


def _install() -> str:
    """'' once axe-core is in the cache, else why not."""
    npm = shutil.which("npm")
    if not npm and (os.environ.get("CI") == "true" or os.environ.get("KG_INSTALL_CHROMIUM") == "1"):
        subprocess.run([str(INSTALLER), "npm"], capture_output=True, timeout=1200, check=False)
        npm = shutil.which("npm")
    if not npm:
        return (
            "the axe-core check needs npm (Debian: docker/chromium-dev/install npm, or "
            "KG_INSTALL_CHROMIUM=1 to let the tests run it)"
        )
    CACHE.mkdir(parents=True, exist_ok=True)
    command = [
        npm,
        "install",
        "--prefix",
        str(CACHE),
        "--no-audit",
        "--no-fund",
        "--no-save",
        "--ignore-scripts",
        f"axe-core@{VERSION}",
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"could not install axe-core with npm: {e}"
    if done.returncode != 0 or not SCRIPT.exists():
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return f"could not install axe-core@{VERSION} with npm: {said}"
    return ""
