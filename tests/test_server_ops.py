"""`kg serve` operated as a service, against real server processes: keys made and revoked
while it runs and across restarts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx

from tests.served import ROOT, Served, kg_command, kg_env, serve


def kg_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        kg_command(*args), cwd=ROOT, env=kg_env(home), capture_output=True, text=True, timeout=120
    )


def whoami(served: Served, key: str) -> httpx.Response:
    return httpx.get(
        served.url + "/v1/whoami", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


# -- keys -----------------------------------------------------------------------------------


def test_keys_while_serving_and_across_restarts(tmp_path: Path) -> None:
    """On the embedded store the server holds the data directory, yet `kg keys` works: a key
    made while it runs works at once, a revoked one fails at the next request, and both
    stay so after a restart; a key made while it was stopped works after the restart."""
    home = tmp_path / "home"
    served = serve(home, [("alice", "admin")])
    before = served.key("alice", "admin")  # made before the server started
    try:
        made = kg_cli(home, "keys", "create", "--group", "bob", "--role", "write", "--json")
        assert made.returncode == 0, made.stderr
        assert "through the store of the running kg process" in made.stderr
        live = json.loads(made.stdout)
        assert whoami(served, live["key"]).json()["group_id"] == "bob"
        doomed = json.loads(
            kg_cli(home, "keys", "create", "--group", "bob", "--role", "read", "--json").stdout
        )
        assert whoami(served, doomed["key"]).status_code == 200
        revoked = kg_cli(home, "keys", "revoke", doomed["key_id"])
        assert revoked.returncode == 0, revoked.stderr
        assert whoami(served, doomed["key"]).status_code == 401  # the very next request
        listed = json.loads(kg_cli(home, "keys", "list", "--json").stdout)
        by_id = {k["key_id"]: k for k in listed}
        assert by_id[doomed["key_id"]]["revoked_at"] and not by_id[live["key_id"]]["revoked_at"]
        assert served.stop() == 0
        # Stopped: the commands own the store again (and say nothing of a running process).
        later = kg_cli(home, "keys", "create", "--group", "carol", "--role", "read", "--json")
        assert later.returncode == 0 and "running" not in later.stderr
        served.start()
        carol = json.loads(later.stdout)["key"]
        for key, group in ((before, "alice"), (live["key"], "bob"), (carol, "carol")):
            assert whoami(served, key).json()["group_id"] == group
        assert whoami(served, doomed["key"]).status_code == 401
        # An unknown id is a one-line error, and nothing else changes.
        bad = kg_cli(home, "keys", "revoke", "nosuchkey123")
        assert bad.returncode == 1 and "no key 'nosuchkey123'" in bad.stderr
        assert whoami(served, before).status_code == 200
    finally:
        served.stop()


def test_kg_keys_still_refuses_a_data_directory_no_server_runs_for(tmp_path: Path) -> None:
    """The lock's holder must be a live process with its socket: a stale lock file (a crash)
    is no way in, and any other holder is still refused with the one-line error."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "kg.lock").write_text(f"{os.getpid()}\n{tmp_path / 'nowhere.sock'}\n")
    made = kg_cli(home, "keys", "create", "--group", "g", "--role", "read")
    assert made.returncode == 0, made.stderr  # not locked: the command opens the store itself
    holder = subprocess.Popen(
        [
            *kg_command()[:1],
            "-c",
            "import asyncio, fcntl, sys\n"
            "f = open(sys.argv[1] + '/kg.lock', 'a+'); fcntl.flock(f, fcntl.LOCK_EX)\n"
            "print('ready', flush=True); asyncio.run(asyncio.sleep(60))",
            str(home),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        refused = kg_cli(home, "keys", "list")
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.startswith("kg: error: data directory"), refused.stderr
        assert "is in use by another kg process" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr  # no traceback
    finally:
        holder.kill()
        holder.wait()
