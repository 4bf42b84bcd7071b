"""`kg serve` operated as a service, against real server processes: SIGTERM in the middle of
writes, keys made and revoked while it runs and across restarts, secrets kept out of
everything it writes, and its API metrics in `kg stats`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from kg import KG
from kg.schemas.graph import EpisodeStatus
from kg.server.keys import key_hash
from tests.served import ROOT, Served, kg_command, kg_env, serve

# The shutdown test: writers, and statements per episode. A group's writes run one at a time
# and one takes most of a second, so those queued at SIGTERM outlast --graceful-timeout 1
# and get cut off. (Kept small: a reopened store replays its whole log before it answers.)
# 16 queued writes of the most facts an episode takes: draining them outlasts the 1 s
# graceful timeout on an idle machine too (6 x 400 finished within it there).
WRITERS, FACTS = 16, 500


def kg_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        kg_command(*args), cwd=ROOT, env=kg_env(home), capture_output=True, text=True, timeout=120
    )


def whoami(served: Served, key: str) -> httpx.Response:
    return httpx.get(
        served.url + "/v1/whoami", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


# -- lifecycle ------------------------------------------------------------------------------


def test_sigterm_in_the_middle_of_writes(tmp_path: Path) -> None:
    """Writers keep posting episodes; SIGTERM lands among them. Every acknowledged episode is
    in the graph whole, no episode is half-written, the exit is clean (code 0, no
    traceback), and the writes cut off by the graceful timeout were finished, not dropped."""
    home = tmp_path / "home"
    served = serve(
        home, [("ops", "write")], "--graceful-timeout", "1", "--key-concurrency", str(WRITERS)
    )
    key = served.key("ops", "write")
    acked: dict[str, str] = {}  # subject -> episode uuid, for every 2xx
    refused: list[tuple[int, str]] = []  # other answers: 503s once shutdown begins
    failed: list[str] = []  # connection errors: no answer, so never acknowledged
    sent: set[str] = set()
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        with httpx.Client(
            base_url=served.url, headers={"Authorization": f"Bearer {key}"}, timeout=60
        ) as c:
            for i in range(10_000):
                if stop.is_set():
                    return
                subject = f"W{n}x{i}"
                body = {
                    "source": "facts",
                    "reference_time": "2024-01-01T00:00:00Z",
                    "facts": [
                        {"subject": subject, "predicate": "KNOWS", "object": f"{subject}o{j}"}
                        for j in range(FACTS)
                    ],
                }
                with lock:
                    sent.add(subject)
                try:
                    r = c.post("/v1/episodes", json=body)
                except httpx.HTTPError as exc:
                    with lock:
                        failed.append(type(exc).__name__)
                    return  # the server is going away
                with lock:
                    if r.status_code == 201:
                        acked[subject] = r.json()["episode_uuid"]
                    else:
                        refused.append((r.status_code, r.text))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(acked) < WRITERS // 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert served.process is not None
    served.process.send_signal(signal.SIGTERM)
    try:
        code = served.process.wait(120)
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    served.process = None
    log = served.log()
    assert code == 0, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert acked, "no write was acknowledged before the signal"
    assert failed or refused, "SIGTERM did not land among the writes"
    assert all(status == 503 for status, _ in refused), refused

    async def check() -> tuple[int, int]:
        async with await KG.open(home=home) as kg:
            episodes = await kg.store.find_episodes("ops", None, None, include_rolled_back=True)
            facts = await kg.facts(group_id="ops", predicate="KNOWS", limit=100_000)
        counts: dict[str, int] = {}
        for f in facts:
            counts[f.subject] = counts.get(f.subject, 0) + 1
        for e in episodes:
            assert e.status is EpisodeStatus.ingested, e
        stored = set(counts)
        for subject, uuid in acked.items():  # acknowledged: there, whole
            assert uuid in {e.uuid for e in episodes}, subject
            assert counts.get(subject) == FACTS, (subject, counts.get(subject))
        for subject in stored:  # anything stored at all is whole (never half-written)
            assert counts[subject] == FACTS, (subject, counts[subject])
        assert stored <= sent
        return len(episodes), len(stored)

    episodes, stored = asyncio.run(check())
    # Cut off by the graceful timeout: answered 503, yet finished (stored whole, above).
    cut = sum("a write it started is completed, not dropped" in text for _, text in refused)
    assert cut >= 1, (refused, log[-2000:])
    assert episodes == stored >= len(acked) + cut
    # The drain's line (the background worker's stop is logged after it).
    drained = [line for line in log.splitlines() if "shutdown:" in line and "write(s)" in line]
    assert drained and "all finished" in drained[-1], log[-2000:]
    # Every write still in flight at the drain belongs to a request uvicorn cancelled, which
    # was answered the 503 above; a cancelled request's write may also have finished between
    # the cancel and the drain (8 in flight for 9 such answers, once in CI), so not equal.
    assert int(drained[-1].split("shutdown: ")[1].split()[0]) <= cut


class _SilentLLM:
    """An OpenAI-compatible endpoint that takes every request and never answers (until
    closed): an extraction that would outlast any graceful timeout."""

    def __init__(self) -> None:
        import http.server

        self.requests = 0
        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests += 1
                outer.release.wait(300)

            def log_message(self, *args: object) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def test_sigterm_gives_up_a_background_extraction_at_the_graceful_timeout(
    tmp_path: Path,
) -> None:
    """The server's background worker is stopped within --graceful-timeout: an episode sent
    with wait=false whose extraction never answers is handed back (queued again, its claim
    not counted) once the timeout runs out, and the server exits 0 (not after the LLM
    client's own 120 s timeout and retries)."""
    home = tmp_path / "home"
    llm = _SilentLLM()
    served = serve(
        home,
        [("ops", "write")],
        "--graceful-timeout",
        "2",
        "--llm-model",
        "m",
        "--llm-base-url",
        llm.url,
    )
    try:
        with served.client("ops", "write") as c:
            body = {
                "source": "message",
                "content": "Minji: I live in Busan.",
                "reference_time": "2024-01-01T00:00:00Z",
                "wait": False,
            }
            r = c.post("/v1/episodes", json=body)
        assert r.status_code == 202 and r.json()["status"] == "queued", r.text
        deadline = time.monotonic() + 60
        while llm.requests == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert llm.requests, "the worker never asked the LLM"
        assert served.process is not None
        served.process.send_signal(signal.SIGTERM)
        code = served.process.wait(60)
        served.process = None
    finally:
        served.stop()
        llm.close()
    log = served.log()
    assert code == 0, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert "outlasted the graceful timeout" in log, log[-3000:]

    async def check() -> EpisodeStatus:
        async with await KG.open(home=home) as kg:
            (node,) = await kg.store.find_episodes("ops", None, None, include_rolled_back=True)
        assert node.lease_owner is None and node.attempts == 0  # the claim was not counted
        return node.status

    assert asyncio.run(check()) is EpisodeStatus.queued


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
        assert served.process is not None
        assert f"using the store kg serve (pid {served.process.pid}) holds" in made.stderr
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


# -- secrets --------------------------------------------------------------------------------


async def _mcp_calls(served: Served, key: str) -> list[str]:
    """Tool calls (one failing) over MCP; the texts that came back."""
    out: list[str] = []
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        streamable_http_client(served.url + "/mcp", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as s,
    ):
        await s.initialize()
        for tool, args in (
            ("search_memory", {"query": key}),  # a key pasted into a query, by mistake
            ("facts_as_of", {"subject": "Ann"}),
            ("why", {"fact_id": key}),  # not found: the message quotes the id it was given
            ("forget", {"entity": "Ann", "confirm": "Ann"}),  # the write role: refused
        ):
            r = await s.call_tool(tool, args)
            out += [getattr(c, "text", "") for c in r.content]
    return out


def test_secrets_never_leak(tmp_path: Path) -> None:
    """Keys and the metrics token, used rightly and wrongly over HTTP and MCP with the log at
    debug level: none of them, nor a key's hash, appears in the log, /metrics, a problem
    detail, a tool error or `kg keys list`; the public key id is all a listing shows."""
    token = "metrics-" + "t0k3n" * 6
    home = tmp_path / "home"
    served = serve(
        home,
        [("alice", "admin"), ("alice", "write"), ("bob", "read")],
        "--log-level",
        "debug",
        "--metrics-token",
        token,
    )
    keys = list(served.keys.values())
    seen: list[str] = []  # what came back: headers, bodies, tool results

    def keep(r: httpx.Response, *, body: bool = True) -> httpx.Response:
        """body=False: a 200 quoting the caller's own input as data (search echoes its
        query), back to that caller; its headers are still checked."""
        assert body or r.status_code == 200, r.text
        seen.append(json.dumps(dict(r.headers)) + ("\n" + r.text if body else ""))
        return r

    try:
        live = json.loads(
            kg_cli(home, "keys", "create", "--group", "bob", "--role", "admin", "--json").stdout
        )
        keys.append(live["key"])
        with served.client("alice", "admin") as a, served.client() as anon:
            ann = {"subject": "Ann", "predicate": "LIVES_IN", "object": "Oslo"}
            keep(a.post("/v1/episodes", json={"source": "facts", "facts": [ann]}))
            for key in keys:
                auth = {"Authorization": f"Bearer {key}"}
                keep(anon.get("/v1/facts", headers=auth))
                keep(anon.get("/v1/facts", params={"api_key": key}))  # in the URL: 401
                keep(anon.get("/v1/facts", headers=auth, params={"api_key": key}))  # 422
                keep(anon.get("/v1/facts", headers={"Authorization": f"Basic {key}"}))
                keep(anon.get("/v1/facts", headers={"Authorization": f"Bearer {key}x"}))
                keep(anon.get("/v1/facts", headers={"Authorization": f"Bearer {key[:-1]}"}))
                keep(anon.get(f"/v1/facts/{key}/why", headers=auth))  # 404 would quote the id
                keep(anon.post("/v1/search", headers=auth, json={"query": key}), body=False)
                keep(anon.post("/v1/search", headers=auth, json={"query": key, "key": key}))
                keep(anon.post("/v1/search", headers=auth, content=f"{{{key}"))
                keep(anon.get("/metrics", headers=auth))  # a key is not the metrics token
                keep(anon.post("/mcp", headers={"Authorization": f"Bearer {key}x"}, json={}))
            scrape = keep(anon.get("/metrics", headers={"Authorization": f"Bearer {token}"}))
            keep(anon.get("/metrics", headers={"Authorization": f"Bearer {token}x"}))
            keep(anon.get("/metrics", params={"token": token}))
            keep(anon.get(f"/nowhere/{token}"))
        seen.extend(asyncio.run(_mcp_calls(served, served.key("alice", "write"))))
        revoked = kg_cli(home, "keys", "revoke", live["key_id"])
        assert revoked.returncode == 0, revoked.stderr
        keep(whoami(served, live["key"]))
        listings = [kg_cli(home, "keys", "list"), kg_cli(home, "keys", "list", "--json")]
    finally:
        assert served.stop() == 0
    listings += [kg_cli(home, "keys", "list"), kg_cli(home, "keys", "list", "--json")]
    log = served.log()
    assert "DEBUG" in log, "the log was not at debug level"
    assert 'kg_group_size{group="alice"' in scrape.text  # the token did unlock the groups
    # A key in a URL, a token in a path: the access log holds neither (kg.server.access).
    assert re.search(r'"GET /v1/facts\?api_key=~[0-9a-f]{8} HTTP', log)
    assert '"GET unmatched HTTP' in log
    listed = "\n".join(p.stdout + p.stderr for p in [*listings, revoked])
    for key in keys:
        secret = key[16:]
        for text, where in ((log, "log"), (listed, "kg keys"), *((s, "answer") for s in seen)):
            assert secret[:8] not in text, (where, text[-3000:])  # not even a prefix
            assert key_hash(key) not in text, where
        assert key[3:15] in listed  # the public id is listed
    for text in (log, listed, *seen):
        assert token not in text


def test_json_logs_carry_request_and_key_ids_never_keys_or_subjects(tmp_path: Path) -> None:
    """`--log-format json`: every log line is one JSON object; a request's lines carry its
    request id (the caller's X-Request-Id when well formed, echoed; else a fresh one) and,
    once the key is known, its public key id. No line holds a key, its secret, or a subject
    name sent in a body, a query or a search."""
    home = tmp_path / "home"
    served = serve(home, [("alice", "write")], "--log-format", "json")
    key = served.key("alice", "write")
    name = "Zelda Quartermaine"
    answers: dict[str, httpx.Response] = {}
    try:
        with served.client("alice", "write") as c, served.client() as anon:
            fact = {"subject": name, "predicate": "LIVES_IN", "object": "Oslo"}
            answers["given"] = c.post(
                "/v1/episodes",
                json={"source": "facts", "facts": [fact]},
                headers={"X-Request-Id": "req-42.a:b"},
            )
            answers["fresh"] = c.get("/v1/facts", params={"subject": name})
            answers["bad"] = c.post(
                "/v1/search", json={"query": name}, headers={"X-Request-Id": "not ok\tid"}
            )
            answers["key"] = c.get("/v1/whoami", headers={"X-Request-Id": key})
            answers["anon"] = anon.get("/v1/facts", headers={"X-Request-Id": "anon-1"})
    finally:
        assert served.stop() == 0
    assert [r.status_code for r in answers.values()] == [201, 200, 200, 200, 401]
    ids = {k: r.headers["x-request-id"] for k, r in answers.items()}
    assert ids["given"] == "req-42.a:b" and ids["anon"] == "anon-1"
    for k in ("fresh", "bad", "key"):  # none given, malformed, or shaped like a key
        assert re.fullmatch(r"[0-9a-f]{32}", ids[k]), ids[k]
    log = served.log()
    assert key[16:24] not in log and key_hash(key) not in log
    assert "Zelda" not in log and "Quartermaine" not in log
    lines = [ln for ln in log.splitlines() if ln.strip() and not ln.startswith("kg serve: ")]
    records = [json.loads(ln) for ln in lines]  # each line one JSON object
    access = {r["request_id"]: r for r in records if r["logger"] == "kg.access"}
    key_id = key[3:15]
    for k, route, status in (
        ("given", "/v1/episodes", 201),
        ("fresh", "/v1/facts", 200),
        ("bad", "/v1/search", 200),
        ("anon", "/v1/facts", 401),
    ):
        line = access[ids[k]]
        assert (line["route"], line["status"], line["method"]) == (route, status, line["method"])
        assert line.get("key_id") == (None if k == "anon" else key_id), line
        assert isinstance(line["duration_ms"], float) and line["time"].endswith("Z")


# -- API metrics in kg stats -----------------------------------------------------------------


def test_api_metrics_reach_kg_stats(tmp_path: Path) -> None:
    """Per-route and per-tool counters, per group: live at /v1/stats, saved every
    --metrics-flush seconds (so a killed server loses at most one interval), summed across
    restarts, and shown by `kg stats` and `kg stats --json`."""
    home = tmp_path / "home"
    served = serve(home, [("alice", "write"), ("bob", "write")], "--metrics-flush", "0.5")
    try:
        with served.client("alice", "write") as a, served.client("bob", "write") as b:
            for i in range(3):
                body = {
                    "source": "facts",
                    "facts": [{"subject": "Ann", "predicate": "KNOWS", "object": f"P{i}"}],
                }
                assert a.post("/v1/episodes", json=body).status_code == 201
            assert a.get("/v1/episodes/nope").status_code == 404
            assert b.post("/v1/episodes", json=body).status_code == 201
            assert b.get("/v1/facts").status_code == 200
            asyncio.run(_mcp_calls(served, served.key("alice", "write")))
            live = a.get("/v1/stats").json()["metrics"]["api"]
        assert live["routes"]["POST /v1/episodes"]["calls"] == 3
        assert live["routes"]["GET /v1/episodes/{episode_id}"]["errors"] == 1
        assert (live["tools"]["why"]["calls"], live["tools"]["why"]["errors"]) == (1, 1)
        assert "GET /v1/facts" not in live["routes"]  # bob's call is bob's
        time.sleep(2.5)  # a few flushes
        assert served.process is not None
        served.process.kill()  # no shutdown, no final flush: only the periodic ones count
        served.process.wait()
        served.process = None
        first = json.loads(kg_cli(home, "--group", "alice", "stats", "--json").stdout)["api"]
        assert first["routes"]["POST /v1/episodes"]["calls"] == 3
        assert first["routes"]["GET /v1/episodes/{episode_id}"]["errors"] == 1
        assert first["tools"]["search_memory"]["calls"] == 1
        assert (first["tools"]["forget"]["calls"], first["tools"]["forget"]["errors"]) == (1, 1)
        assert first["routes"]["POST /v1/episodes"]["mean_latency_ms"] > 0
        served.start("--metrics-flush", "60")
        with served.client("alice", "write") as a:
            assert a.post("/v1/search", json={"query": "Ann"}).status_code == 200
            assert a.post("/v1/episodes", json=body).status_code == 201
        assert served.stop() == 0  # the final flush, at shutdown
        after = json.loads(kg_cli(home, "--group", "alice", "stats", "--json").stdout)["api"]
        assert after["routes"]["POST /v1/episodes"]["calls"] == 4  # summed, not replaced
        assert after["routes"]["POST /v1/search"]["calls"] == 1
        bob = json.loads(kg_cli(home, "--group", "bob", "stats", "--json").stdout)["api"]
        assert set(bob["routes"]) == {"POST /v1/episodes", "GET /v1/facts"}
        assert bob["routes"]["POST /v1/episodes"]["calls"] == 1 and not bob["tools"]
        table = kg_cli(home, "--group", "alice", "stats")
        assert "api: POST /v1/episodes" in table.stdout and "4 calls, 0 errors" in table.stdout
        assert "mcp tool: why" in table.stdout and "1 calls, 1 errors" in table.stdout
    finally:
        served.stop()
