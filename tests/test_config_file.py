"""kg.toml: the same keys as the environment variables, flag > env > file > default, shown
by `kg config show` with secrets masked; a bad file is a one-line error before anything
runs; and `kg serve` really takes its settings from it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.served import ROOT, kg_command, kg_env, serve

SECRET_TOKEN = "tok-" + "s3cr3t" * 4
FILE = f"""
group = "from-file"
llm_model = "file-model"
port = 9000
log_format = "json"
metrics_token = "{SECRET_TOKEN}"
uri = "bolt://neo4j:hunter2pass@db:7687"
allowed_hosts = "kg.example"
"""


def kg(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        kg_command(*args),
        cwd=ROOT,
        env={**kg_env(home), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def shown(home: Path, *args: str, **env: str) -> dict[str, Any]:
    run = kg(home, *args, "config", "show", "--json", **env)
    assert run.returncode == 0, run.stderr
    return dict(json.loads(run.stdout))


def test_flag_beats_env_beats_file_beats_default(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "kg.toml").write_text(FILE)
    run = kg(home, "--group", "from-flag", "config", "show", "--json", KG_PORT="9100")
    assert run.returncode == 0, run.stderr
    assert SECRET_TOKEN not in run.stdout and "hunter2pass" not in run.stdout
    out = json.loads(run.stdout)
    assert out["file"] == str(home / "kg.toml") and out["found_by"] == "data directory"
    rows = {r["key"]: r for r in out["settings"]}
    assert (rows["group"]["value"], rows["group"]["source"]) == ("from-flag", "flag")
    assert (rows["port"]["value"], rows["port"]["source"]) == ("9100", "env")
    assert (rows["llm_model"]["value"], rows["llm_model"]["source"]) == ("file-model", "file")
    assert (rows["host"]["value"], rows["host"]["source"]) == ("127.0.0.1", "default")
    assert rows["metrics_token"]["value"] == "[redacted]"
    assert rows["uri"]["value"] == "bolt://neo4j:[redacted]@db:7687"
    assert rows["openai_api_key"]["env"] == "OPENAI_API_KEY"
    assert "serve" in rows["llm_model"]["commands"] and "ingest" in rows["llm_model"]["commands"]
    # the table, too, never shows a secret
    table = kg(home, "config", "show", OPENAI_API_KEY="sk-" + "x" * 30)
    assert table.returncode == 0 and "xxxxxxxx" not in table.stdout
    assert SECRET_TOKEN not in table.stdout and "kg.toml (data directory)" in table.stdout


def test_the_file_is_found_by_flag_env_or_data_directory(tmp_path: Path) -> None:
    home, other = tmp_path / "home", tmp_path / "other.toml"
    home.mkdir()
    other.write_text('group = "other"\n')
    assert shown(home)["file"] is None  # no kg.toml: nothing read
    by_env = shown(home, KG_CONFIG=str(other))
    assert (by_env["file"], by_env["found_by"]) == (str(other), "KG_CONFIG")
    by_flag = shown(home, "--config", str(other))
    assert by_flag["found_by"] == "--config"
    rows = {r["key"]: r for r in by_flag["settings"]}
    assert (rows["group"]["value"], rows["group"]["source"]) == ("other", "file")


def test_a_bad_file_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    cases = {
        'grup = "typo"\n': "unknown key 'grup'",
        "group = \n": "not a readable TOML file",
        "group = {name = 1}\n": "group: a value, not a table",
        "[serve]\nport = 1\n": "unknown key 'serve'",  # flat: the variables have no sections
    }
    for text, message in cases.items():
        (home / "kg.toml").write_text(text)
        run = kg(home, "facts")
        assert run.returncode == 1 and message in run.stderr, run.stderr
        assert str(home / "kg.toml") in run.stderr and len(run.stderr.strip().splitlines()) == 1
    missing = kg(home, "--config", str(tmp_path / "nope.toml"), "facts")
    assert missing.returncode == 1 and "no such file" in missing.stderr


def test_kg_serve_takes_its_settings_from_the_file(tmp_path: Path) -> None:
    """A kg.toml in the data directory sets serve's log format (no flag, no variable)."""
    home = tmp_path / "home"
    home.mkdir(parents=True)
    (home / "kg.toml").write_text('log_format = "json"\nlog_level = "info"\n')
    served = serve(home, [("alice", "read")])
    try:
        with served.client("alice", "read") as c:
            assert c.get("/v1/whoami").status_code == 200
    finally:
        assert served.stop() == 0
    lines = [ln for ln in served.log().splitlines() if ln.startswith("{")]
    assert any(json.loads(ln).get("route") == "/v1/whoami" for ln in lines), served.log()
