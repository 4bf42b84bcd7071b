"""`kg serve` over HTTP, against a real server process: every endpoint, the roles, and the
isolation of groups (another group's ids are answered exactly as ids that exist nowhere)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.served import Served, serve

KEYS = [("alice", "admin"), ("alice", "write"), ("alice", "read"), ("bob", "admin")]


def facts_episode(
    *facts: tuple[str, str, str, str], when: str = "2020-01-01T00:00:00Z"
) -> dict[str, Any]:
    return {
        "source": "facts",
        "reference_time": when,
        "facts": [
            {"subject": s, "predicate": p, "object": o, "valid_at": v} for s, p, o, v in facts
        ],
    }


def ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, r.text
    return r.json()


def made(r: httpx.Response, status: int = 201) -> Any:
    """A new episode: 201 written (202 queued), `Location` naming it."""
    body = ok(r, status)
    assert r.headers["location"] == f"/v1/episodes/{body['episode_uuid']}"
    return body


def items(r: httpx.Response) -> list[Any]:
    """A list's one page (asserting it is the last)."""
    page = ok(r)
    assert set(page) == {"items", "next_cursor"} and page["next_cursor"] is None, page
    return list(page["items"])


def problem(r: httpx.Response, status: int) -> str:
    """The problem's one-line detail, after checking it is a problem with `status`."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["status"] == status and "\n" not in body["detail"]
    assert "Traceback" not in r.text
    return str(body["detail"])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = serve(tmp_path_factory.mktemp("serve-http") / "home", KEYS)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def seeded(served: Served) -> dict[str, Any]:
    """Alice moved from Paris to Berlin; a note about her is stored unextracted; Bob (another
    group) lives in Rome."""
    with served.client("alice") as a, served.client("bob") as b:
        paris = made(
            a.post(
                "/v1/episodes",
                json=facts_episode(("Alice", "LIVES_IN", "Paris", "2020-01-01T00:00:00Z")),
            )
        )
        berlin = made(
            a.post(
                "/v1/episodes",
                json=facts_episode(
                    ("Alice", "LIVES_IN", "Berlin", "2022-06-01T00:00:00Z"),
                    when="2022-06-01T00:00:00Z",
                ),
            )
        )
        note = made(
            a.post(
                "/v1/episodes",
                json={
                    "source": "text",
                    "content": "Alice likes green tea",
                    "extract": False,
                    "reference_time": "2023-01-01T00:00:00Z",
                },
            )
        )
        rome = made(
            b.post(
                "/v1/episodes",
                json=facts_episode(("Bob", "LIVES_IN", "Rome", "2021-01-01T00:00:00Z")),
            )
        )
        berlin_fact = items(a.get("/v1/facts", params={"subject": "Alice"}))[0]["id"]
        rome_fact = items(b.get("/v1/facts", params={"subject": "Bob"}))[0]["id"]
    return {
        "paris": paris,
        "berlin": berlin,
        "note": note,
        "rome": rome,
        "berlin_fact": berlin_fact,
        "rome_fact": rome_fact,
    }


def test_health_and_spec_need_no_key(served: Served) -> None:
    with served.client() as c:
        assert ok(c.get("/health"))["status"] == "ok"
        spec = ok(c.get("/openapi.json"))
    paths = set(spec["paths"])
    assert {
        "/v1/episodes",
        "/v1/facts",
        "/v1/history",
        "/v1/search",
        "/v1/context",
        "/v1/facts/{fact_id}/why",
        "/v1/log",
        "/v1/rollback",
        "/v1/erase/entity",
        "/v1/erase/group",
        "/v1/export",
        "/v1/stats",
        "/v1/metrics",
        "/health",
        "/metrics",
    } <= paths
    # No operation takes a group: the key decides it.
    for ops in spec["paths"].values():
        for op in ops.values():
            assert all(p["name"] != "group_id" for p in op.get("parameters", []))
    for name in ("AddEpisode", "SearchRequest", "RollbackRequest", "FactsQuery"):
        assert "group_id" not in spec["components"]["schemas"].get(name, {}).get("properties", {})


def test_every_read_endpoint(served: Served, seeded: dict[str, Any]) -> None:
    with served.client("alice", "read") as c:
        assert ok(c.get("/v1/whoami")) == {
            "group_id": "alice",
            "role": "read",
            "key_id": served.key("alice", "read")[3:15],
            "channel": "agent",  # the default: what a key writes claims the lowest trust
        }
        now = items(c.get("/v1/facts", params={"subject": "Alice"}))
        assert [f["object"] for f in now] == ["Berlin"]
        march21 = items(
            c.get("/v1/facts", params={"subject": "Alice", "valid_at": "2021-03-01T00:00:00Z"})
        )
        assert [f["object"] for f in march21] == ["Paris"]
        # As kg knew it before Berlin was ingested: Paris, still true.
        known = items(c.get("/v1/history", params={"subject": "Alice"}))
        first = min((f for f in known if f["object"] == "Paris"), key=lambda f: f["known_from"])
        before = items(
            c.get("/v1/facts", params={"subject": "Alice", "known_at": first["known_from"]})
        )
        assert [f["object"] for f in before] == ["Paris"]
        assert {f["object"] for f in known} == {"Paris", "Berlin"}
        why = ok(c.get(f"/v1/facts/{seeded['berlin_fact']}/why"))
        assert seeded["berlin"]["episode_uuid"] in {e["id"] for e in why["episodes"]}
        found = ok(c.post("/v1/search", json={"query": "Alice lives", "include_closed": True}))
        assert {h["object"] for h in found["hits"] if h["kind"] == "fact"} == {"Paris", "Berlin"}
        assert {h["status"] for h in found["hits"] if h["kind"] == "fact"} == {"closed", "current"}
        assert len(found["rankings"]) == len(found["hits"])
        assert found["branches"], "each branch's hits and latency (the --explain view)"
        ctx = ok(c.post("/v1/context", json={"query": "where does Alice live", "max_tokens": 200}))
        assert "Berlin" in ctx["context"] and "valid 2022-06-01" in ctx["context"]
        episodes = ok(c.get("/v1/episodes", params={"limit": 10}))["items"]
        assert [e["id"] for e in episodes][:3] == [
            seeded["note"]["episode_uuid"],
            seeded["berlin"]["episode_uuid"],
            seeded["paris"]["episode_uuid"],
        ]
        one = ok(c.get(f"/v1/episodes/{seeded['note']['episode_uuid']}"))
        assert one["content"] == "Alice likes green tea"
        events = items(c.get("/v1/log"))
        assert any(e["kind"] == "closure" and "Paris" in e["detail"] for e in events)
        assert ok(c.get("/v1/quarantine")) == {"items": [], "next_cursor": None}
        stats = ok(c.get("/v1/stats"))
        assert stats["stats"]["group_id"] == "alice" and stats["stats"]["episodes"] == 3
        assert stats["metrics"]["ingest"]["facts_added"] == 2
        assert ok(c.get("/v1/metrics"))["queries"]["queries"] >= 2  # the search and context
        dry = ok(c.post("/v1/rollback", json={"episode_ids": [seeded["berlin"]["episode_uuid"]]}))
        assert not dry["applied"] and [x["object"] for x in dry["restored"]] == ["Paris"]


def test_search_asked_at_and_abstain_below(served: Served, seeded: dict[str, Any]) -> None:
    """The search options `kg search` has: time words read against `asked_at`, and
    abstention; bad values refused with the CLI's checks, as one-line problems."""
    query = "where did Alice live last year"
    with served.client("alice", "read") as c:
        for asked, in_utc, year, city in (
            ("2022-01-01T09:00:00+09:00", "2022-01-01T00:00:00Z", "2021", "Paris"),
            ("2024-05-01T00:00:00Z", "2024-05-01T00:00:00Z", "2023", "Berlin"),
        ):
            found = ok(c.post("/v1/search", json={"query": query, "asked_at": asked}))
            assert [h["object"] for h in found["hits"] if h["kind"] == "fact"] == [city], found
            assert found["time"]["asked_at"] == in_utc
            assert found["time"]["applied"]["start"].startswith(year), found["time"]
            block = ok(c.post("/v1/context", json={"query": query, "asked_at": asked}))
            other = "Berlin" if city == "Paris" else "Paris"
            assert city in block["context"] and other not in block["context"]
        # No embedder on this server: abstention (a cosine cutoff) is refused, not silently
        # turned into an empty answer for every query.
        for cutoff in (0.49, -1):
            assert "abstain_below needs an embedder" in problem(
                c.post("/v1/search", json={"query": "Alice", "abstain_below": cutoff}), 422
            )
        # Refused as kg search refuses them, on one line.
        for when in ("0001-01-01T00:00:01+00:01", "9999-12-31T23:59:59-01:00"):
            assert "outside years 1" in problem(
                c.post("/v1/search", json={"query": "x", "asked_at": when}), 422
            )
        number = "is a number, not a time"
        assert number in problem(c.post("/v1/search", json={"query": "x", "asked_at": 2021}), 422)
        assert number in problem(
            c.post("/v1/context", json={"query": "x", "asked_at": "1700000000"}), 422
        )
        assert "'someday' is not a time kg can read" in problem(
            c.post("/v1/search", json={"query": "x", "asked_at": "someday"}), 422
        )
        for bad in (1.5, -2, "nan"):
            assert "abstain_below" in problem(
                c.post("/v1/search", json={"query": "x", "abstain_below": bad}), 422
            )
        assert "add the cosine method" in problem(
            c.post(
                "/v1/search",
                json={"query": "x", "recipe": "episodes_bm25", "abstain_below": 0.4},
            ),
            422,
        )


def test_roles(served: Served, seeded: dict[str, Any]) -> None:
    berlin = seeded["berlin"]["episode_uuid"]
    with served.client("alice", "read") as r, served.client("alice", "write") as w:
        for resp in (
            r.post(
                "/v1/episodes",
                json=facts_episode(("Alice", "LIKES", "Tea", "2020-01-01T00:00:00Z")),
            ),
            r.post("/v1/rollback", json={"episode_ids": [berlin], "dry_run": False}),
            w.post("/v1/rollback", json={"episode_ids": [berlin], "dry_run": False}),
            w.post("/v1/erase/entity", json={"subject": "Alice", "confirm": "Alice"}),
            w.post("/v1/erase/group", json={"confirm": "alice"}),
            w.get("/v1/export"),
        ):
            assert "role" in problem(resp, 403)
        added = made(
            w.post(
                "/v1/episodes",
                json=facts_episode(("Carol", "WORKS_AT", "Acme", "2020-01-01T00:00:00Z")),
            )
        )
        assert added["status"] == "added"
        again = made(
            w.post(
                "/v1/episodes",
                json=facts_episode(("Carol", "WORKS_AT", "Acme", "2020-01-01T00:00:00Z")),
            ),
            200,
        )
        assert again["status"] == "duplicate"
    # The roles held: Berlin is still current.
    with served.client("alice") as a:
        assert [f["object"] for f in items(a.get("/v1/facts", params={"subject": "Alice"}))] == [
            "Berlin"
        ]


def test_errors_are_one_line_problems(served: Served) -> None:
    with served.client() as anon, served.client("alice", "write") as w:
        assert "no API key" in problem(anon.get("/v1/facts"), 401)
        assert anon.get("/v1/facts").headers["www-authenticate"].startswith("Bearer")
        bad = {"Authorization": "Bearer kg_aaaaaaaaaaaa_" + "x" * 43}
        assert "invalid or revoked" in problem(anon.get("/v1/facts", headers=bad), 401)
        assert "group_id" in problem(w.get("/v1/facts", params={"group_id": "bob"}), 422)
        assert "group_id" in problem(
            w.post(
                "/v1/episodes",
                json={
                    **facts_episode(("A", "LIVES_IN", "B", "2020-01-01T00:00:00Z")),
                    "group_id": "bob",
                },
            ),
            422,
        )
        # The CLI's messages, word for word.
        assert "valid_at: 'someday' is not a time kg can read" in problem(
            w.get("/v1/facts", params={"valid_at": "someday"}), 422
        )
        # Found by the fuzz: a time in year 1 that is year 0 once converted to UTC was a 500.
        for when in ("0001-01-01T00:00:01+00:01", "9999-12-31T23:59:59-01:00"):
            assert "outside years 1" in problem(w.get("/v1/facts", params={"valid_at": when}), 422)
            assert "outside years 1" in problem(
                w.post("/v1/search", json={"query": "x", "known_at": when}), 422
            )
        # Numbers are never times, wherever a time goes (2021 would be Unix second 2021).
        number = "is a number, not a time: give an ISO 8601 time"
        assert number in problem(w.get("/v1/facts", params={"valid_at": "1700000000"}), 422)
        for body in (
            {**facts_episode(("A", "LIVES_IN", "B", "2020-01-01T00:00:00Z")), "reference_time": 0},
            facts_episode(("A", "LIVES_IN", "B", 2021)),  # type: ignore[arg-type]
            {
                "source": "facts",
                "facts": [
                    {
                        "subject": "A",
                        "predicate": "P",
                        "object": "B",
                        "valid_at": "2020-01-01T00:00:00Z",
                        "invalid_at": 1.7e9,
                    }
                ],
            },
        ):
            assert number in problem(w.post("/v1/episodes", json=body), 422)
        assert number in problem(w.post("/v1/search", json={"query": "x", "known_at": 5}), 422)
        assert number in problem(
            w.post("/v1/rollback", json={"source_description": "x", "since": 1}), 422
        )
        assert "unknown recipe 'nope'" in problem(
            w.post("/v1/search", json={"query": "x", "recipe": "nope"}), 422
        )
        detail = problem(
            w.post("/v1/episodes", json={"source": "text", "content": "hi", "extract": True}), 422
        )
        assert "need an LLM" in detail
        assert "needs at least one fact" in problem(
            w.post("/v1/episodes", json={"source": "facts", "facts": []}), 422
        )
        assert problem(w.get("/v1/nowhere"), 404) == "Not Found"
        assert "over 1048576 bytes" in problem(
            w.post(
                "/v1/episodes",
                content=b"{" + b" " * (1 << 20) + b"}",
                headers={"content-type": "application/json"},
            ),
            413,
        )
        malformed = w.post(
            "/v1/search", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert "not valid JSON" in problem(malformed, 400)


def test_isolation_every_endpoint(served: Served, seeded: dict[str, Any]) -> None:
    """Bob's admin key, aimed at Alice's data through every endpoint: nothing of hers shows,
    her ids are not found, and nothing of hers changes."""
    alice_ids = [seeded[k]["episode_uuid"] for k in ("paris", "berlin", "note")]
    alice_fact = seeded["berlin_fact"]
    with served.client("bob") as b:
        assert ok(b.get("/v1/whoami"))["group_id"] == "bob"
        assert items(b.get("/v1/facts", params={"subject": "Alice"})) == []
        assert items(b.get("/v1/facts", params={"object": "Berlin"})) == []
        assert items(b.get("/v1/history", params={"subject": "Alice"})) == []
        assert {f["subject"] for f in items(b.get("/v1/history"))} == {"Bob"}
        for recipe in ("combined_hybrid_rrf", "episodes_bm25", "entities_hybrid_rrf", None):
            found = ok(
                b.post(
                    "/v1/search",
                    json={
                        "query": "Alice Berlin Paris green tea",
                        "recipe": recipe,
                        "include_closed": True,
                    },
                )
            )
            assert not found["hits"], found
        assert "Alice" not in ok(b.post("/v1/context", json={"query": "Alice"}))["context"]
        assert alice_fact in problem(b.get(f"/v1/facts/{alice_fact}/why"), 404)
        assert problem(b.get("/v1/facts/no-such-fact/why"), 404).replace(
            "no-such-fact", alice_fact
        ) == problem(b.get(f"/v1/facts/{alice_fact}/why"), 404)  # same answer as for a made-up id
        listed = {e["id"] for e in ok(b.get("/v1/episodes"))["items"]}
        assert listed == {seeded["rome"]["episode_uuid"]}
        for ep in alice_ids:
            problem(b.get(f"/v1/episodes/{ep}"), 404)
            problem(b.post("/v1/rollback", json={"episode_ids": [ep]}), 404)
            problem(b.post("/v1/rollback", json={"episode_ids": [ep], "dry_run": False}), 404)
        none = ok(b.post("/v1/rollback", json={"source_description": "alice's notes"}))
        assert none["episodes"] == []
        problem(b.post("/v1/erase/entity", json={"subject": "Alice", "confirm": "Alice"}), 404)
        assert "group id" in problem(b.post("/v1/erase/group", json={"confirm": "alice"}), 422)
        assert "Alice" not in json.dumps(items(b.get("/v1/log")))
        exported = b.get("/v1/export")
        assert exported.status_code == 200 and "Alice" not in exported.text
        assert "Rome" in exported.text
        assert not any(i in exported.text for i in [*alice_ids, alice_fact])
        assert ok(b.get("/v1/stats"))["stats"]["episodes"] == 1
    with served.client("alice") as a:  # nothing of Alice's moved
        assert [f["object"] for f in items(a.get("/v1/facts", params={"subject": "Alice"}))] == [
            "Berlin"
        ]
        assert len(ok(a.get("/v1/episodes"))["items"]) >= 3


def test_admin_rollback_erase_export(served: Served, seeded: dict[str, Any]) -> None:
    with served.client("alice") as a:
        poison = made(
            a.post(
                "/v1/episodes",
                json=facts_episode(
                    ("Alice", "LIVES_IN", "Mars", "2024-01-01T00:00:00Z"),
                    when="2024-01-01T00:00:00Z",
                ),
            )
        )
        assert [f["object"] for f in items(a.get("/v1/facts", params={"subject": "Alice"}))] == [
            "Mars"
        ]
        plan = ok(a.post("/v1/rollback", json={"episode_ids": [poison["episode_uuid"]]}))
        assert not plan["applied"]
        done = ok(
            a.post("/v1/rollback", json={"episode_ids": [poison["episode_uuid"]], "dry_run": False})
        )
        assert done["applied"] and [x["object"] for x in done["restored"]] == ["Berlin"]
        assert [f["object"] for f in items(a.get("/v1/facts", params={"subject": "Alice"}))] == [
            "Berlin"
        ]
        lines = a.get("/v1/export", params={"embeddings": False})
        assert lines.headers["content-type"].startswith("application/x-ndjson")
        assert "Berlin" in lines.text and len(lines.text.splitlines()) > 5
        made(
            a.post(
                "/v1/episodes",
                json=facts_episode(
                    ("Dave", "WORKS_AT", "Initech", "2020-01-01T00:00:00Z"),
                    ("Erin", "LIKES", "chess", "2020-01-01T00:00:00Z"),
                ),
            )
        )
        preview = ok(a.post("/v1/erase/entity", json={"subject": "Dave", "dry_run": True}))
        assert preview["dry_run"] and preview["episodes_deleted"] == 1
        assert [(f["subject"], f["object"]) for f in preview["other_facts_removed"]] == [
            ("Erin", "chess")
        ]
        assert len(items(a.get("/v1/facts", params={"subject": "Dave"}))) == 1  # nothing erased
        assert "confirm" in problem(a.post("/v1/erase/entity", json={"subject": "Dave"}), 422)
        assert "confirm" in problem(
            a.post("/v1/erase/entity", json={"subject": "Dave", "confirm": "dave"}), 422
        )
        receipt = ok(a.post("/v1/erase/entity", json={"subject": "Dave", "confirm": "Dave"}))
        assert receipt["subject"] == "Dave" and receipt["episodes_deleted"] == 1
        assert items(a.get("/v1/facts", params={"subject": "Dave"})) == []
        problem(a.post("/v1/erase/entity", json={"subject": "Dave", "confirm": "Dave"}), 404)


def test_wait_false_queues_and_the_server_writes_it(tmp_path: Path) -> None:
    """`wait: false` answers at once with a queued episode; the server's own worker writes
    its facts (an embedded store is the server's alone: no `kg worker` could reach it)."""
    s = serve(tmp_path / "home", [("carol", "write")])
    try:
        with s.client("carol", "write") as c:
            r = made(
                c.post(
                    "/v1/episodes",
                    json={
                        **facts_episode(("Carol", "LIVES_IN", "Lisbon", "2021-01-01T00:00:00Z")),
                        "wait": False,
                    },
                ),
                202,
            )
            assert r["status"] == "queued"
            deadline = time.monotonic() + 60
            while not items(c.get("/v1/facts", params={"subject": "Carol"})):
                assert time.monotonic() < deadline, "the queued episode was never written"
                time.sleep(0.2)
            assert ok(c.get(f"/v1/episodes/{r['episode_uuid']}"))["status"] == "ingested"
            again = made(
                c.post(
                    "/v1/episodes",
                    json={
                        **facts_episode(("Carol", "LIVES_IN", "Lisbon", "2021-01-01T00:00:00Z")),
                        "wait": False,
                    },
                ),
                200,
            )
            assert again["status"] == "duplicate"
    finally:
        s.stop()


def test_a_search_response_carries_why_each_scope_abstained_or_not() -> None:
    """/v1/search answers what kg search --explain shows: each abstention test per scope
    (this test server has no embedder, so the model is checked on its own)."""
    from datetime import UTC, datetime

    from kg.retrieval.results import AbstainCheck, SearchResults
    from kg.schemas.search import Scope, SearchView
    from kg.server.models import SearchResponse

    now = datetime(2026, 1, 1, tzinfo=UTC)
    refused = AbstainCheck(signal="joint", value=0.21, cutoff=0.27, abstained=True)
    passed = AbstainCheck(signal="cosine", value=0.52, cutoff=0.3, abstained=False)
    results = SearchResults(
        query="q",
        group_id="g",
        view=SearchView(valid_at=now, known_at=now),
        abstained={Scope.episodes: 0.21},
        abstain_checks={Scope.episodes: [passed, refused]},
    )
    body = json.loads(SearchResponse.of(results).model_dump_json())
    assert body["abstained"] == {"episodes": 0.21}
    assert body["abstain_checks"] == {
        "episodes": [
            {"signal": "cosine", "value": 0.52, "cutoff": 0.3, "abstained": False},
            {"signal": "joint", "value": 0.21, "cutoff": 0.27, "abstained": True},
        ]
    }
