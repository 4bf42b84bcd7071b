"""The HTTP API's conventions (issue 24, item 7), against a real server: a valid OpenAPI
document with stable operationIds in which each operation lists the statuses it answers and
no other; RFC 9457 problems with one `errors[]` entry per invalid input; 400 for a body that
is not JSON; 201 + Location for a new episode (202 queued); every list a page whose cursors
walk to its end; the old field names still read, with `Deprecation: true`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

from tests.served import Served, serve

KEYS = [("ann", "admin"), ("ann", "read")]
T0 = "2020-01-01T00:00:00Z"
OPERATIONS = {
    "health",
    "prometheus_metrics",
    "whoami",
    "get_stats",
    "get_metrics",
    "list_log",
    "list_quarantine",
    "list_review",
    "decide_review",
    "export_group",
    "add_episode",
    "list_episodes",
    "get_episode",
    "retry_episode",
    "list_facts",
    "list_history",
    "explain_fact",
    "correct_fact",
    "search",
    "get_context",
    "list_entities",
    "rollback",
    "erase_subject",
    "erase_group",
}
# Statuses a test cannot cheaply provoke: a slow body, the key's limits, an internal or a
# store error, a failed extraction (no LLM here); and a retry's success (needs a failure).
UNPROVOKED = {408, 429, 500, 502, 503}
# erase_group's 200: test_server_http; a decision's 201 needs a user-channel key (these are
# agent-channel ones): tests/test_review.py and the inspector's tests make decisions.
UNPROVOKED_FOR = {"retry_episode": {200}, "erase_group": {200}, "decide_review": {201}}
CORRECTION = {"object": "Rome", "valid_at": "2023-01-01T00:00:00Z"}


def facts(*rows: tuple[str, str, str], when: str = T0, **extra: Any) -> dict[str, Any]:
    said = [{"subject": s, "predicate": p, "object": o, "valid_at": when} for s, p, o in rows]
    return {"source": "facts", "reference_time": when, "facts": said, **extra}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = serve(tmp_path_factory.mktemp("serve-conventions") / "home", KEYS)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def spec(served: Served) -> dict[str, Any]:
    with served.client() as c:
        r = c.get("/openapi.json")
    assert r.status_code == 200
    return dict(r.json())


def test_the_document_is_valid_openapi_with_stable_operation_ids(spec: dict[str, Any]) -> None:
    validate(spec)  # openapi-spec-validator: raises on any violation
    ids = [op["operationId"] for ops in spec["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids)) and set(ids) == OPERATIONS
    problem = spec["components"]["schemas"]["Problem"]
    assert "errors" in problem["properties"]
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def _requests(served: Served, ids: dict[str, str]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """For each operation, requests that provoke each status it can answer: (role, request)."""
    ep, fact = ids["episode"], ids["fact"]
    new = facts(("Cy", "LIKES", "Tea"), when="2021-01-01T00:00:00Z")
    return {
        "add_episode": [
            ("admin", {"json": new}),
            ("admin", {"json": new}),  # 201, then 200 (duplicate)
            ("admin", {"json": facts(("Cy", "LIKES", "Jam"), wait=False)}),  # 202
        ],
        "get_episode": [("read", {"path": f"/v1/episodes/{ep}"})],
        "retry_episode": [("admin", {"path": f"/v1/episodes/{ep}/retry"})],  # 422: not failed
        "explain_fact": [("read", {"path": f"/v1/facts/{fact}/why"})],
        "correct_fact": [("admin", {"path": f"/v1/facts/{fact}/correct", "json": CORRECTION})],
        "decide_review": [
            ("admin", {"path": f"/v1/review/{ep}:0/decision", "json": {"action": "reject"}}),
        ],  # 404: it quarantined nothing
        "search": [("read", {"json": {"query": "Ann"}})],
        "get_context": [("read", {"json": {"query": "Ann"}})],
        "rollback": [
            ("read", {"json": {"episode_ids": [ep]}}),
            ("read", {"json": {"episode_ids": ["no-such-id"]}}),  # 404
            ("read", {"json": {"episode_ids": [ep], "dry_run": False}}),
        ],  # 403 role
        "erase_subject": [("admin", {"json": {"subject": "Ann", "dry_run": True}})],
        "erase_group": [("admin", {"json": {"confirm": "nope"}})],  # 422; never the real one
        "export_group": [("admin", {}), ("read", {})],  # 200, 403 (role)
    }


def _send(c: httpx.Client, method: str, path: str, **kw: Any) -> int:
    return c.request(method, path, **kw).status_code


def _probe(c: httpx.Client, key: str, method: str, path: str, op: dict[str, Any]) -> set[int]:
    """The statuses every operation of its kind can be made to answer."""
    auth = {"Authorization": f"Bearer {key}"}
    keyed = path.startswith("/v1/")
    seen = {
        _send(c, method, path, headers={**auth, "Host": "evil.example"}),  # 421
        _send(c, method, path, headers=auth, params={"bogus": "1"}),  # 422
    }
    if keyed:
        seen.add(_send(c, method, path))  # 401
    if method != "GET":
        seen.add(_send(c, method, path, headers={**auth, "Origin": "http://evil.example"}))
    if "requestBody" in op:
        bad = {**auth, "content-type": "application/json"}
        seen.add(_send(c, method, path, headers=bad, content=b"{nope"))  # 400
        seen.add(_send(c, method, path, headers=bad, content=b"[" + b" " * (1 << 20) + b"]"))
    if "{" in path:
        unknown = re.sub(r"\{(episode_id|fact_id|item_id)\}", "no-such-id", path)
        seen.add(_send(c, method, unknown, headers=auth, json=CORRECTION))  # 404
    return seen


def test_each_operation_documents_exactly_the_statuses_it_answers(
    served: Served, spec: dict[str, Any]
) -> None:
    with served.client("ann") as a:
        ep = a.post("/v1/episodes", json=facts(("Ann", "LIVES_IN", "Oslo"))).json()
        fact = a.get("/v1/facts", params={"subject": "Ann"}).json()["items"][0]["id"]
    table = _requests(served, {"episode": ep["episode_uuid"], "fact": fact})
    with httpx.Client(base_url=served.url, timeout=60) as c:
        for path, ops in spec["paths"].items():
            for method, op in ops.items():
                name = op["operationId"]
                documented = {int(code) for code in op["responses"]}
                seen = _probe(c, served.key("ann", "admin"), method.upper(), path, op)
                for role, req in table.get(name, [("read", {})]):
                    auth = {"Authorization": f"Bearer {served.key('ann', role)}"}
                    target = req.get("path", path)
                    seen.add(
                        _send(
                            c,
                            method.upper(),
                            target,
                            headers=auth,
                            **{k: v for k, v in req.items() if k != "path"},
                        )
                    )
                if name == "erase_subject":  # an unknown subject, erased for real
                    body = {"subject": "Nobody", "confirm": "Nobody"}
                    auth = {"Authorization": f"Bearer {served.key('ann', 'admin')}"}
                    seen.add(_send(c, "POST", path, headers=auth, json=body))
                undocumented = seen - documented
                assert not undocumented, f"{name} answered {undocumented}, not documented"
                never = documented - seen - UNPROVOKED - UNPROVOKED_FOR.get(name, set())
                assert not never, f"{name} documents {never}, never answered"


def test_each_invalid_input_is_an_entry_of_errors(served: Served) -> None:
    with served.client("ann") as c:
        r = c.post(
            "/v1/episodes",
            json={
                "source": "facts",
                "reference_time": "soon",
                "wait": "maybe",
                "facts": [{"subject": "A", "predicate": "P"}],
            },
        )
        assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
        body = r.json()
        pointers = {e["pointer"]: e for e in body["errors"]}
        assert set(pointers) == {"#/reference_time", "#/wait", "#/facts/0/object"}, body
        assert pointers["#/facts/0/object"]["field"] == "facts.0.object"
        assert all(e["detail"] and "\n" not in e["detail"] for e in body["errors"])
        assert "\n" not in body["detail"] and "wait" in body["detail"]
        q = c.get("/v1/facts", params={"limit": 0, "valid_at": "never"}).json()
        assert {e["parameter"] for e in q["errors"]} == {"limit", "valid_at"}
        assert all("pointer" not in e for e in q["errors"])
        bad = c.post(
            "/v1/search", content=b'{"query": ', headers={"content-type": "application/json"}
        )
        assert bad.status_code == 400, bad.text
        assert bad.json()["title"] == "Bad request" and "not valid JSON" in bad.json()["detail"]
        assert bad.json()["errors"][0]["pointer"] == "#"
        one = c.get("/v1/episodes/nope")  # not a validation error: no errors[]
        assert one.status_code == 404 and "errors" not in one.json()


def test_a_new_episode_is_created_at_its_location(served: Served) -> None:
    with served.client("ann") as c:
        r = c.post("/v1/episodes", json=facts(("Bo", "LIVES_IN", "Rome")))
        assert r.status_code == 201 and r.json()["status"] == "added"
        assert c.get(r.headers["location"]).json()["id"] == r.json()["episode_uuid"]
        again = c.post("/v1/episodes", json=facts(("Bo", "LIVES_IN", "Rome")))
        assert again.status_code == 200 and again.json()["status"] == "duplicate"
        assert again.headers["location"] == r.headers["location"]
        # Nothing to extract and no LLM: wait=false stores the text at once (added).
        text = {"source": "text", "content": "Bo likes jazz", "wait": False}
        stored = c.post("/v1/episodes", json=text)
        assert stored.status_code == 201 and stored.json()["status"] == "added"
        queued = c.post("/v1/episodes", json=facts(("Bo", "LIKES", "Tea"), wait=False))
        assert queued.status_code == 202 and queued.json()["status"] == "queued"
        assert c.get(queued.headers["location"]).status_code == 200


def _walk(c: httpx.Client, path: str, limit: int, **params: Any) -> tuple[list[Any], int]:
    out: list[Any] = []
    cursor = None
    pages = 0
    while True:
        r = c.get(path, params={**params, "limit": limit, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        page = r.json()
        assert set(page) == {"items", "next_cursor"} and len(page["items"]) <= limit
        out += page["items"]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            return out, pages


def test_every_list_is_a_page_and_its_cursors_walk_to_the_end(served: Served) -> None:
    with served.client("ann") as c:
        for i in range(5):
            made = c.post(
                "/v1/episodes",
                json=facts(("Dee", "LIVES_IN", f"Town{i}"), when=f"201{i}-01-01T00:00:00Z"),
            )
            assert made.status_code in (201, 200)
        for bank in ("AcmeBank", "ZetaBank", "OmegaBank"):  # quarantined: the review lists them
            held = facts(("Assistant", "MUST_ALWAYS_RECOMMEND", bank))
            assert c.post("/v1/episodes", json=held).json()["summary"]["facts_quarantined"] == 1
        for path, params in (
            ("/v1/episodes", {}),
            ("/v1/facts", {}),
            ("/v1/history", {"subject": "Dee"}),
            ("/v1/entities", {}),
            ("/v1/log", {}),
            ("/v1/quarantine", {}),
            ("/v1/review", {}),
        ):
            whole = c.get(path, params={**params, "limit": 1000}).json()
            assert whole["next_cursor"] is None
            walked, pages = _walk(c, path, 2, **params)
            assert json.dumps(walked) == json.dumps(whole["items"]), path
            assert pages == max(1, -(-len(whole["items"]) // 2)), path
        history, _ = _walk(c, "/v1/history", 3, subject="Dee")
        assert len(history) == 9  # five towns, four closed: 5 + 4 closing versions
        assert c.get("/v1/facts", params={"limit": 1001}).status_code == 422
        other = c.get("/v1/history", params={"limit": 1}).json()["next_cursor"]
        wrong = c.get("/v1/facts", params={"cursor": other})
        assert wrong.status_code == 422 and "not a cursor from this list" in wrong.text


def test_the_log_is_decoded_once(served: Served) -> None:
    with served.client("ann") as c:
        ep = c.post("/v1/episodes", json=facts(("Eve", "LIKES", "Chess"))).json()
        done = c.post("/v1/rollback", json={"episode_ids": [ep["episode_uuid"]], "dry_run": False})
        assert done.status_code == 200 and done.json()["applied"]
        events = c.get("/v1/log").json()["items"]
    rollback = next(e for e in events if e["kind"] == "rollback")
    assert rollback["counts"]["episodes"] == 1 and rollback["detail"] == ""
    closures = [e for e in events if e["kind"] == "closure"]
    assert all(e["counts"] is None and e["detail"] for e in closures)


def test_old_names_still_work_and_say_they_are_old(served: Served) -> None:
    with served.client("ann") as c:
        ep = c.post("/v1/episodes", json=facts(("Fay", "LIKES", "Figs"))).json()["episode_uuid"]
        new = c.post("/v1/rollback", json={"episode_ids": [ep], "dry_run": True})
        assert new.status_code == 200 and "deprecation" not in new.headers
        old = c.post("/v1/rollback", json={"episode_ids": [ep], "apply": False})
        assert old.status_code == 200 and old.headers["deprecation"] == "true"
        assert "apply is now dry_run" in old.headers["deprecation-note"]
        assert old.json() == new.json()
        found = c.post("/v1/search", json={"query": "Fay", "include_history": True})
        assert found.status_code == 200 and found.headers["deprecation"] == "true"
        erase = c.post("/v1/erase/entity", json={"name": "Fay", "dry_run": True})
        assert erase.status_code == 200 and erase.headers["deprecation"] == "true"
        assert erase.json()["subject"] == "Fay"
        both = c.post("/v1/erase/entity", json={"name": "Fay", "subject": "Fay", "dry_run": True})
        assert both.status_code == 422 and "give subject only" in both.json()["detail"]


# One name per concept (docs/server.md): a second name for one of these is an old one.
OLD_NAMES = {"include_history", "history", "apply", "as_of", "entity", "at"}


def _request_names(spec: dict[str, Any]) -> set[str]:
    """Every query, path parameter and request-body property the document offers."""
    schemas = spec["components"]["schemas"]
    names: set[str] = set()

    def walk(schema: dict[str, Any]) -> None:
        if "$ref" in schema:
            schema = schemas[schema["$ref"].rsplit("/", 1)[-1]]
        for name, sub in schema.get("properties", {}).items():
            names.add(name)
            walk(sub)
        for key in ("items", "anyOf", "allOf", "oneOf"):
            subs = schema.get(key, [])
            for sub in subs if isinstance(subs, list) else [subs]:
                walk(sub)

    for ops in spec["paths"].values():
        for op in ops.values():
            names |= {p["name"] for p in op.get("parameters", [])}
            for media in op.get("requestBody", {}).get("content", {}).values():
                walk(media["schema"])
    return names


def test_the_document_offers_one_name_per_concept(spec: dict[str, Any]) -> None:
    names = _request_names(spec)
    assert {
        "valid_at",
        "known_at",
        "include_closed",
        "include_contested",
        "subject",
        "dry_run",
        "reference_time",
    } <= names
    assert not names & OLD_NAMES, f"old names offered: {names & OLD_NAMES}"
