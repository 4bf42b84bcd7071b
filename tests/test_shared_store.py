"""CLI commands and `kg mcp` over stdio share the embedded store a running `kg serve` holds
(issue 24 item 6): real processes, a `kg serve` subprocess on a temporary home, then `kg`
commands and a stdio MCP session against the same home. They reach the owner's FalkorDB
server through its socket (named in the lock file), say so in one line on stderr, never stop
it, and fail in one line, with nothing half written, when the owner exits under them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kg import KG
from kg.store.falkordb.embedded import running_socket
from tests.mcp_client import call, mcp_stdio
from tests.served import ROOT, Served, kg_command, kg_env, serve
from tests.test_mcp_agent import agent_session

pytestmark = pytest.mark.falkordb_only("the embedded store's lock and server process")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = serve(tmp_path / "home", [("default", "admin"), ("agent", "admin")])
    try:
        yield s
    finally:
        s.stop()


def kg(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        kg_command(*args),
        env=kg_env(home),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def episodes_file(path: Path, n: int, *, first: int = 0) -> Path:
    """`n` episodes of one fact each, a person apiece (no LLM needed)."""
    with path.open("w") as f:
        for i in range(first, first + n):
            fact = {"subject": f"Person{i}", "predicate": "LIVES_IN", "object": f"Town{i % 7}"}
            ref = f"2020-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z"
            f.write(json.dumps({"source": "facts", "reference_time": ref, "facts": [fact]}) + "\n")
    return path


def noted(served: Served, r: subprocess.CompletedProcess[str]) -> None:
    assert served.process is not None
    note = f"kg: note: using the store kg serve (pid {served.process.pid}) holds"
    assert note in r.stderr, r.stderr


def page(r: httpx.Response) -> list[Any]:
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


def believed_versions(c: httpx.Client, subject: str, n: int) -> list[Any]:
    """The subject's fact versions kg still believes, once there are `n` (queued episodes
    are written by a worker meanwhile)."""
    deadline = time.monotonic() + 60
    while True:
        history = page(c.get("/v1/history", params={"subject": subject}))
        believed = [f for f in history if f["known_to"] is None]
        if len(believed) >= n or time.monotonic() > deadline:
            return believed
        time.sleep(0.2)


def still_serving(served: Served) -> None:
    """The owner and its store outlived the commands: it answers, and writes."""
    assert served.process is not None and served.process.poll() is None
    with served.client("default") as c:
        r = c.post(
            "/v1/episodes",
            json={
                "source": "facts",
                "reference_time": "2023-01-01",
                "facts": [{"subject": "Owner", "predicate": "LIVES_IN", "object": "Here"}],
            },
        )
        assert r.status_code == 201, r.text


def test_cli_reads_and_writes_through_a_running_server(served: Served, tmp_path: Path) -> None:
    with served.client("default") as c:
        r = c.post(
            "/v1/episodes",
            json={
                "source": "facts",
                "reference_time": "2020-01-01",
                "facts": [{"subject": "Minji", "predicate": "LIVES_IN", "object": "Seoul"}],
            },
        )
        assert r.status_code == 201, r.text
    moved = tmp_path / "moved.jsonl"
    moved.write_text(
        json.dumps(
            {
                "source": "facts",
                "reference_time": "2024-06-01",
                "facts": [{"subject": "Minji", "predicate": "LIVES_IN", "object": "Busan"}],
            }
        )
        + "\n"
    )
    wrote = kg(served.home, "ingest", str(moved), "--json")
    assert wrote.returncode == 0, wrote.stderr
    noted(served, wrote)
    [added] = json.loads(wrote.stdout)["results"]
    assert added["summary"]["facts_closed"] == 1  # it closed the fact the server wrote
    read = kg(served.home, "facts", "--subject", "Minji", "--json")
    assert read.returncode == 0, read.stderr
    noted(served, read)
    assert [f["object"] for f in json.loads(read.stdout)] == ["Busan"]
    with served.client("default") as c:  # the server reads what the CLI wrote
        assert [f["object"] for f in page(c.get("/v1/facts", params={"subject": "Minji"}))] == [
            "Busan"
        ]
    still_serving(served)


async def test_an_mcp_stdio_session_shares_the_store_of_a_running_server(
    served: Served,
) -> None:
    """The scripted agent session of test_mcp_agent, over stdio, on the served home."""
    async with mcp_stdio(served.home, "--group", "agent", "--role", "admin") as s:
        await agent_session(s)
        # The server's worker and this process's both poll the queue: the group's lease lets
        # one of them claim at a time, so each queued episode is written once.
        for i in range(6):
            queued = await call(
                s,
                "add_memory",
                source="facts",
                reference_time=f"2021-0{i + 1}-01",
                facts=[{"subject": "Queued", "predicate": "LIVES_IN", "object": f"T{i}"}],
                wait=False,
            )
            assert queued["status"] == "queued"
    with served.client("agent") as c:
        believed = believed_versions(c, "Queued", 6)
        # Each episode written once: one believed version of each fact, from its own episode.
        assert sorted(f["object"] for f in believed) == [f"T{i}" for i in range(6)]
        assert len({f["episode_id"] for f in believed}) == 6
        now = page(c.get("/v1/facts", params={"subject": "Queued"}))
        assert [f["object"] for f in now] == ["T5"]
        alice = page(c.get("/v1/facts", params={"subject": "Alice"}))
        assert [f["object"] for f in alice] == ["Paris"]  # the agent's rollback, as served
    still_serving(served)


def test_episodes_queued_from_the_cli_are_written_by_the_servers_worker(
    served: Served, tmp_path: Path
) -> None:
    queued = kg(served.home, "ingest", str(episodes_file(tmp_path / "q.jsonl", 3)), "--no-wait")
    assert queued.returncode == 0, queued.stderr
    noted(served, queued)
    with served.client("default") as c:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if len(page(c.get("/v1/facts", params={"predicate": "LIVES_IN"}))) == 3:
                break
            time.sleep(0.2)
        assert len(page(c.get("/v1/facts", params={"predicate": "LIVES_IN"}))) == 3


def test_a_stronger_durability_than_the_servers_is_refused(served: Served) -> None:
    r = kg(served.home, "--durability", "always", "facts")
    assert r.returncode == 1
    assert "--durability always" in r.stderr and "fsyncs everysec" in r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("error") == 1


def test_a_second_server_on_a_held_store_is_refused(served: Served) -> None:
    """A server attached to another process's store would lose it when that one exits."""
    assert served.process is not None
    r = kg(served.home, "serve", "--port", "1")
    assert r.returncode == 1
    assert f"is in use by another kg process (pid {served.process.pid})" in r.stderr
    still_serving(served)


def stored_episodes(home: Path) -> int:
    """Episodes in the default group, counted on the owner's server directly."""
    import redis

    running = running_socket(home)
    assert running is not None
    conn = redis.Redis(unix_socket_path=running[1])
    try:
        reply: Any = conn.execute_command(
            "GRAPH.RO_QUERY", "default", "MATCH (e:Episodic) RETURN count(e)"
        )
        return int(reply[1][0][0])
    except redis.ResponseError:  # no graph yet
        return 0
    finally:
        conn.close()


# Enough to outlast a graceful stop: on an idle machine 3,000 were all written first.
EPISODES = 12000


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_the_owner_exiting_mid_command_is_one_line_and_loses_nothing(
    served: Served, tmp_path: Path, how: str
) -> None:
    """Stopped by its operator, or killed (its server then exits by its parent-death
    signal, flushing what it acknowledged)."""
    many = episodes_file(tmp_path / "many.jsonl", EPISODES)
    ingest = subprocess.Popen(
        kg_command("ingest", str(many)),
        env=kg_env(served.home),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while stored_episodes(served.home) < 50:  # the CLI is writing through the server
            assert time.monotonic() < deadline and ingest.poll() is None
            time.sleep(0.05)
        if how == "SIGTERM":
            assert served.stop() == 0  # the operator stops the server mid-ingest
        else:
            assert served.process is not None
            served.process.kill()
            served.process.wait()
        _, stderr = ingest.communicate(timeout=120)
    finally:
        if ingest.poll() is None:
            ingest.kill()
    assert ingest.returncode == 1
    lines = [line for line in stderr.splitlines() if line.startswith("kg: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert (
        "kg serve (pid" in lines[0]
        and "has gone" in lines[0]
        and "run the command again" in lines[0]
    )
    # Re-run on the store alone: what was written is whole (each episode's write is atomic),
    # so the resumed ingest skips it and writes the rest: every person once.
    again = kg(served.home, "ingest", str(many), "--json", timeout=600)
    assert again.returncode == 0, again.stderr
    statuses = [r["status"] for r in json.loads(again.stdout)["results"]]
    assert 0 < statuses.count("duplicate") < EPISODES and set(statuses) == {"added", "duplicate"}
    people = asyncio.run(current_people(served.home))
    assert people == sorted(f"Person{i}" for i in range(EPISODES))


async def current_people(home: Path) -> list[str]:
    async with await KG.open(home=home) as k:
        return sorted(f.subject for f in await k.facts(predicate="LIVES_IN", limit=EPISODES + 1))


def test_long_running_commands_end_in_one_line_when_the_owner_exits(served: Served) -> None:
    """`kg worker` and `kg mcp` run until stopped: on a shared store they end when its owner
    does (its server goes with it), instead of failing every call from then on."""
    env = kg_env(served.home)
    running = [
        subprocess.Popen(
            kg_command(*args),
            env=env,
            cwd=ROOT,
            stdin=subprocess.PIPE,  # kg mcp waits for a client on it
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in (("worker",), ("mcp", "--group", "agent"))
    ]
    try:
        deadline = time.monotonic() + 60
        for p in running:  # both attached (the note) before the owner goes
            assert p.stderr is not None
            line = p.stderr.readline()
            assert "using the store kg serve" in line, line
            assert time.monotonic() < deadline
        assert served.stop() == 0
        for p in running:
            # communicate() closes kg mcp's stdin: whether it saw the owner go first or
            # its input end first, it must say the owner has gone.
            _, stderr = p.communicate(timeout=60)
            assert p.returncode == 1, stderr
            errors = [ln for ln in stderr.splitlines() if ln.startswith("kg: error:")]
            assert len(errors) == 1 and "Traceback" not in stderr, stderr
            assert "has gone: it exited, and its server with it" in errors[0]
    finally:
        for p in running:
            if p.poll() is None:
                p.kill()
                p.wait()
