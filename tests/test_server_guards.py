"""The server's edges against a real `kg serve` and real sockets: Host and Origin checks on
every route, header and body deadlines, a cap on one client's connections, per-key limits,
and an access log that keeps no query values."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.served import Served, kg_command, kg_env, serve
from tests.test_server_ops import ROOT

KEYS = [("a", "admin"), ("b", "read"), ("c", "read"), ("d", "read"), ("e", "read")]
HEADER_S, BODY_S, PER_CLIENT = 1.0, 1.0, 12


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = serve(
        tmp_path_factory.mktemp("guards") / "home",
        KEYS,
        "--allowed-host",
        "kg.example",
        "--header-timeout",
        str(HEADER_S),
        "--body-timeout",
        str(BODY_S),
        "--client-connections",
        str(PER_CLIENT),
        "--key-rate",
        "5",
        "--key-burst",
        "5",
        "--key-concurrency",
        "2",
        "--key-queue",
        "1",
    )
    try:
        yield s
    finally:
        s.stop()


def auth(served: Served, group: str, role: str = "read") -> dict[str, str]:
    return {"Authorization": f"Bearer {served.key(group, role)}"}


def connect(served: Served) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", served.port), timeout=10)
    return s


def closed_within(s: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """(closed by the server within `seconds`, what it sent first)."""
    s.settimeout(seconds)
    got = b""
    try:
        while chunk := s.recv(4096):
            got += chunk
        return True, got
    except TimeoutError:
        return False, got
    except ConnectionResetError:
        return True, got


# -- Host and Origin --------------------------------------------------------------------


def test_a_foreign_host_is_refused_on_every_route(served: Served) -> None:
    """DNS rebinding: a page on evil.example, its name rebound to 127.0.0.1, reaches the
    server with `Host: evil.example`: refused everywhere, not only at /mcp."""
    with httpx.Client(base_url=served.url, timeout=30) as c:
        for method, path in (
            ("GET", "/health"),
            ("GET", "/v1/whoami"),
            ("GET", "/openapi.json"),
            ("GET", "/"),
            ("POST", "/v1/search"),
            ("POST", "/mcp"),
            ("GET", "/metrics"),
        ):
            r = c.request(method, path, headers={"Host": "evil.example", **auth(served, "e")})
            assert r.status_code == 421, (path, r.text)
            assert "--allowed-host" in r.json()["detail"]
        for host in (
            "kg.example",
            f"KG.example:{served.port}",
            f"localhost:{served.port}",
            f"127.0.0.1:{served.port}",
            f"[::1]:{served.port}",
        ):
            r = c.get("/v1/whoami", headers={"Host": host, **auth(served, "e")})
            assert r.status_code == 200, (host, r.text)


def test_a_foreign_origin_may_not_change_state(served: Served) -> None:
    episode = {
        "source": "facts",
        "facts": [{"subject": "Ann", "predicate": "LIKES", "object": "Tea"}],
    }
    own = f"http://127.0.0.1:{served.port}"
    with httpx.Client(base_url=served.url, headers=auth(served, "a", "admin"), timeout=30) as c:
        for origin in (
            "http://evil.example",
            f"http://localhost:{served.port + 1}",
            "null",
            f"https://127.0.0.1:{served.port}.evil.example",
        ):
            r = c.post("/v1/episodes", json=episode, headers={"Origin": origin})
            assert r.status_code == 403 and "Origin" in r.json()["detail"], (origin, r.text)
            r = c.post("/mcp", json={}, headers={"Origin": origin})
            assert r.status_code == 403, (origin, r.text)
        assert (
            c.get("/v1/facts", params={"subject": "Ann"}).json()["items"] == []
        )  # nothing written
        # Reads may come from anywhere (a browser cannot read the answer cross-site); the
        # server's own pages, and clients that send no Origin, may write.
        assert c.get("/v1/whoami", headers={"Origin": "http://evil.example"}).status_code == 200
        assert c.post("/v1/episodes", json=episode, headers={"Origin": own}).status_code == 201
        assert c.post("/v1/episodes", json=episode).status_code == 201


def test_every_interface_needs_an_allow_list(tmp_path: Path) -> None:
    """Bound to any address but loopback, the checks stay on: they need the names clients
    use, and the server does not start without them."""
    run = subprocess.run(
        kg_command("serve", "--host", "0.0.0.0", "--port", "0"),
        cwd=ROOT,
        env=kg_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1, run.stderr
    assert "--allowed-host" in run.stderr and "Traceback" not in run.stderr
    wide = serve(
        tmp_path / "wide",
        [("w", "read")],
        "--host",
        "0.0.0.0",
        "--allowed-host",
        "kg.example,kg2.example",
    )
    try:
        with httpx.Client(base_url=wide.url, headers=auth(wide, "w"), timeout=30) as c:
            assert c.get("/v1/whoami", headers={"Host": "evil.example"}).status_code == 421
            assert c.get("/v1/whoami", headers={"Host": "kg2.example"}).status_code == 200
            assert c.get("/v1/whoami").status_code == 200  # loopback names: always
    finally:
        wide.stop()


# -- connections and bodies --------------------------------------------------------------


def test_unfinished_headers_are_closed(served: Served) -> None:
    socks = [connect(served) for _ in range(5)]
    for i, s in enumerate(socks):
        if i:  # the first sends nothing at all
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    start = time.monotonic()
    for s in socks:
        closed, _ = closed_within(s, HEADER_S + 5 - (time.monotonic() - start))
        assert closed, "a connection with unfinished headers stayed open"
        s.close()
    # A complete request on a fresh connection is answered, then kept alive as usual.
    with httpx.Client(base_url=served.url, timeout=30) as c:
        assert c.get("/health").status_code == 200


def test_a_trickled_body_is_cut_off_with_408(served: Served) -> None:
    s = connect(served)
    key = served.key("c", "read")
    head = (
        f"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/json\r\nContent-Length: 200\r\n\r\n"
    )
    s.sendall(head.encode())
    start = time.monotonic()
    answer = b""
    s.settimeout(0.2)
    while time.monotonic() - start < BODY_S + 5 and b"\r\n\r\n" not in answer:
        try:
            s.sendall(b" ")  # one byte every 0.2 s
        except OSError:
            break
        with contextlib.suppress(TimeoutError):
            answer += s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert time.monotonic() - start < BODY_S + 3
    closed, _ = closed_within(s, 5)
    assert closed, "the connection stayed open after the 408"
    s.close()


def test_one_client_holds_a_bounded_number_of_connections(served: Served) -> None:
    held = [connect(served) for _ in range(PER_CLIENT)]
    try:
        time.sleep(0.2)
        extra = connect(served)
        closed, said = closed_within(extra, HEADER_S / 2)
        assert closed and said.startswith(b"HTTP/1.1 429"), said
        extra.close()
    finally:
        for s in held:
            s.close()
    time.sleep(0.3)
    with httpx.Client(base_url=served.url, timeout=30) as c:  # freed: answered again
        assert c.get("/health").status_code == 200


# -- per-key limits ------------------------------------------------------------------------


def test_one_key_over_its_rate_is_slowed_then_refused_and_others_are_not(served: Served) -> None:
    """Rate 5/s, burst 5: sent one after another, requests past the burst are held back until
    the bucket pays for them, not refused; sent all at once, past what the key may run and
    queue, they are refused with Retry-After; another key is answered at once meanwhile."""
    with httpx.Client(base_url=served.url, timeout=30) as c:
        start = time.monotonic()
        paced = [c.get("/v1/whoami", headers=auth(served, "d")).status_code for _ in range(8)]
        assert paced == [200] * 8
        assert time.monotonic() - start >= (8 - 5) / 5 - 0.1  # slowed to the rate, not refused

        def whoami(_: int) -> tuple[int, str, float]:
            sent = time.monotonic()
            r = c.get("/v1/whoami", headers=auth(served, "b"))
            return r.status_code, r.headers.get("Retry-After", ""), time.monotonic() - sent

        # 10 at once: under the per-client connection cap (12), over what b may run (2) and
        # queue (1).
        with ThreadPoolExecutor(10) as pool, httpx.Client(base_url=served.url) as e:
            flood = pool.map(whoami, range(10))
            other = time.monotonic()
            r = e.get("/v1/whoami", headers=auth(served, "e"))
            assert r.status_code == 200, r.text
            other = time.monotonic() - other
            answers = list(flood)
        codes = [code for code, _, _ in answers]
        assert codes.count(200) >= 3 and 429 in codes, codes
        assert all(int(after) >= 1 for code, after, _ in answers if code == 429)
        assert other < 1.0, "another key waited for this one"


def test_one_key_runs_a_bounded_number_of_requests(served: Served) -> None:
    """Two requests of key c hold its two slots (their bodies still arriving): a third
    waits its turn (the queue holds one), a fourth is refused at once; another key is
    answered meanwhile, and the waiting one once a slot is free. Each step waits for the
    server's own gauges (unkeyed /metrics), not for a sleep."""
    time.sleep(1.2)  # c's bucket full again after the trickle test
    key = served.key("c", "read")
    head = (
        f"POST /v1/rollback HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/json\r\nContent-Length: 50\r\n\r\n"
    )
    with httpx.Client(base_url=served.url, timeout=30) as c, ThreadPoolExecutor(1) as pool:
        slow = [connect(served) for _ in range(2)]
        for s in slow:
            s.sendall(head.encode())
        wait_for_keys(c, running=2, waiting=0)
        third = pool.submit(c.get, "/v1/whoami", headers=auth(served, "c"))
        wait_for_keys(c, running=2, waiting=1)
        fourth = c.get("/v1/whoami", headers=auth(served, "c"))
        assert fourth.status_code == 429 and "waiting" in fourth.json()["detail"], fourth.text
        assert c.get("/v1/whoami", headers=auth(served, "d")).status_code == 200
        for s in slow:
            s.close()  # their bodies never come: the slots free, the third runs
        assert third.result().status_code == 200, third.result().text


def wait_for_keys(c: httpx.Client, *, running: int, waiting: int) -> None:
    """Until the server's gauges show that many keyed requests running and waiting."""
    deadline, seen = time.monotonic() + 30, ""
    while time.monotonic() < deadline:
        text = c.get("/metrics").text
        seen = " ".join(ln for ln in text.splitlines() if ln.startswith("kg_key_requests_"))
        if seen == f"kg_key_requests_running {running:.1f} kg_key_requests_waiting {waiting:.1f}":
            return
        time.sleep(0.05)
    raise AssertionError(f"expected {running} running and {waiting} waiting, saw {seen!r}")


# -- the access log ------------------------------------------------------------------------


def test_the_access_log_keeps_no_query_values(served: Served) -> None:
    """A subject's name in a query string (or a path) never reaches the log; the route and
    a per-run salted hash of each value do."""
    time.sleep(1.2)
    with httpx.Client(base_url=served.url, headers=auth(served, "e"), timeout=30) as c:
        for _ in range(2):
            assert c.get("/v1/history", params={"subject": "Zelda Quux"}).status_code == 200
        assert c.get("/v1/facts/Zelda-Quux/why").status_code == 404
        assert c.get("/v1/Zelda/Quux", params={"Zelda": "x"}).status_code == 404
    deadline = time.monotonic() + 10  # each line is written once its answer has been sent
    while '"GET unmatched?' not in (log := served.log()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "Zelda" not in log and "Quux" not in log
    lines = re.findall(r'"GET /v1/history\?subject=(~[0-9a-f]{8}) HTTP/1.1" 200', log)
    assert len(lines) >= 2 and len(set(lines)) == 1  # the same value, the same hash
    assert '"GET /v1/facts/{fact_id}/why HTTP/1.1" 404' in log
    assert '"GET unmatched?~' in log
