"""The memory inspector (`kg serve` at /) in headless Chromium against a real server.

Debian's /usr/bin/chromium is driven by Playwright's Python package through
`executable_path` (no browser download). Without a browser the tests skip, naming it; under
CI=true (or with KG_INSTALL_CHROMIUM=1) they first install it from Debian's archive
(docker/chromium-dev/install), and under CI=true they fail, naming why, if that fails.
KG_SCREENSHOTS=<dir> keeps the screenshots (docs/screenshots holds the committed copies of
one run; most are taken by tests/test_inspector_views.py, on a realistic group).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.served import Served, serve

CHROMIUM = os.environ.get("KG_CHROMIUM", "/usr/bin/chromium")
INSTALLER = Path(__file__).resolve().parents[1] / "docker" / "chromium-dev" / "install"
KEYS = [("alice", "admin", "user"), ("alice", "read")]  # the inspector's user: user channel


CI = os.environ.get("CI") == "true"
# A fresh CI machine has no browser until the project installs one, as it starts its own Neo4j.
INSTALL = CI or os.environ.get("KG_INSTALL_CHROMIUM") == "1"


def _missing() -> str:
    """What the browser tests lack, or ''."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "needs Playwright's Python package (the dev extra)"
    if Path(CHROMIUM).exists() or shutil.which(CHROMIUM):
        return ""
    if INSTALL and "KG_CHROMIUM" not in os.environ:
        return _install()
    return (
        f"needs Chromium at {CHROMIUM} (Debian: docker/chromium-dev/install, or "
        "KG_INSTALL_CHROMIUM=1 to let the tests run it; or set KG_CHROMIUM)"
    )


def _install() -> str:
    """Run docker/chromium-dev/install; '' once the browser is there, else why not."""
    try:
        done = subprocess.run([str(INSTALLER)], capture_output=True, text=True, timeout=1200)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"could not install Chromium with {INSTALLER}: {e}"
    if done.returncode != 0 or not Path(CHROMIUM).exists():
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return f"could not install Chromium with {INSTALLER}: {said}"
    return ""


MISSING = _missing()
if MISSING and not CI:
    pytest.skip(MISSING, allow_module_level=True)
if MISSING.startswith("needs Playwright"):  # under CI: one clear error, not an ImportError
    raise RuntimeError(f"inspector tests: {MISSING}")

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

Said = tuple[str, str, str, str]  # subject, predicate, object, valid_at
# (name, channel, when, facts) per episode. Alice works at Acme since 2019 and moved from
# Paris to Berlin in 2022; a poisoned forum post says Bob moved from Oslo to Mars; an agent's
# guess contests what Dave said himself; Carol is there to be forgotten.
SEED: list[tuple[str, str, str, list[Said]]] = [
    (
        "Alice's profile",
        "user",
        "2020-01-01T00:00:00Z",
        [
            ("Alice", "LIVES_IN", "Paris", "2020-01-01T00:00:00Z"),
            ("Alice", "WORKS_AT", "Acme", "2019-03-01T00:00:00Z"),
        ],
    ),
    (
        "Alice: we moved to Berlin",
        "user",
        "2022-06-01T00:00:00Z",
        [("Alice", "LIVES_IN", "Berlin", "2022-06-01T00:00:00Z")],
    ),
    (
        "staff directory",
        "document",
        "2018-01-01T00:00:00Z",
        [("Bob", "LIVES_IN", "Oslo", "2018-01-01T00:00:00Z")],
    ),
    (
        "forum post",
        "document",
        "2023-01-01T00:00:00Z",
        [("Bob", "LIVES_IN", "Mars", "2023-01-01T00:00:00Z")],
    ),
    (
        "Dave's profile",
        "user",
        "2021-01-01T00:00:00Z",
        [("Dave", "LIVES_IN", "Rome", "2021-01-01T00:00:00Z")],
    ),
    (
        "agent's guess",
        "agent",
        "2024-01-01T00:00:00Z",
        [("Dave", "LIVES_IN", "Milan", "2024-01-01T00:00:00Z")],
    ),
    (
        "Carol's profile",
        "user",
        "2021-01-01T00:00:00Z",
        [("Carol", "LIVES_IN", "Lisbon", "2021-01-01T00:00:00Z")],
    ),
]


def episode(name: str, channel: str, when: str, facts: list[Said]) -> dict[str, Any]:
    return {
        "source": "facts",
        "name": name,
        "channel": channel,
        "reference_time": when,
        "facts": [
            {"subject": s, "predicate": p, "object": o, "valid_at": v} for s, p, o, v in facts
        ],
    }


def ok(r: Any) -> Any:
    assert r.status_code in (200, 201), r.text
    body = r.json()
    return body["items"] if isinstance(body, dict) and "next_cursor" in body else body


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = serve(tmp_path_factory.mktemp("inspector") / "home", KEYS)
    try:
        with s.client("alice") as c:
            for seed in SEED:
                ok(c.post("/v1/episodes", json=episode(*seed)))
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if MISSING:  # only under CI=true: fail each browser test, naming what is missing
        pytest.fail(f"inspector tests: {MISSING}")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("KG_SCREENSHOTS")
    folder = Path(wanted) if wanted else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def open_page(
    browser: Browser, served: Served, role: str = "admin", group: str = "alice", url: str = "/"
) -> Page:
    """A signed-in page (at `url`); every request it makes must stay on the server (works
    offline)."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    foreign: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(served.url) else foreign.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.foreign, page.errors = foreign, errors  # type: ignore[attr-defined]
    page.goto(served.url + url)
    page.fill("#key", served.key(group, role))
    page.click("#login-form button[type=submit]")
    expect(page.get_by_test_id("who")).to_contain_text(f"role {role}")
    return page


def close(page: Page) -> None:
    assert page.foreign == [], page.foreign  # type: ignore[attr-defined]
    page.close()


def pick(page: Page, name: str) -> None:
    page.fill("#entity-q", name)
    page.locator(f'#entity-list button[data-entity="{name}"]').click()
    expect(page.locator("#at-cursor")).to_have_attribute("data-subject", name)
    ready(page)


def ready(page: Page) -> None:
    expect(page.locator("#at-cursor")).to_have_attribute("data-ready", "true")


def bars(page: Page) -> list[dict[str, str]]:
    found: list[dict[str, str]] = page.eval_on_selector_all(
        ".bar-g", "gs => gs.map(g => ({...g.dataset}))"
    )
    return found


def expected_status(v: dict[str, Any], known: str | None = None) -> str:
    if v["known_to"] and (known is None or v["known_to"] <= known):
        return "retired"
    if v["status"] == "contested":
        return "contested"
    return "closed" if v["valid_to"] else "current"


def version(f: dict[str, Any]) -> str:
    """A fact version's key in the page (`data-version`): versions share the fact's id."""
    return f"{f['id']}@{f['known_from']}"


def test_the_page_is_served_without_a_key_and_loads_nothing_from_elsewhere(
    served: Served,
) -> None:
    with served.client() as c:
        r = c.get("/")
        assert r.status_code == 200 and "memory inspector" in r.text
        assert "default-src 'none'" in r.headers["content-security-policy"]
        assert c.get("/ui/app.js").headers["content-type"].startswith("text/javascript")
        assert c.get("/v1/facts").status_code == 401  # the data still needs a key
        assert "http" not in r.text.split("<body>")[0].replace("http-equiv", "")


def test_subject_view_draws_every_version_as_a_bar_coloured_by_status(
    served: Served, browser: Browser, shots: Path
) -> None:
    with served.client("alice") as c:
        history = ok(c.get("/v1/history", params={"subject": "Alice"}))
        now = ok(c.get("/v1/facts", params={"subject": "Alice"}))
    page = open_page(browser, served)
    pick(page, "Alice")
    page.check("#show-retired")  # retired versions too (hidden unless asked)
    ready(page)
    drawn = bars(page)
    assert len(drawn) == len(history) >= 3
    assert sorted((b["object"], b["status"]) for b in drawn) == sorted(
        (v["object"], expected_status(v)) for v in history
    )
    assert {b["version"] for b in drawn if b["holds"] == "true"} == {version(f) for f in now}
    assert {b["object"] for b in drawn if b["holds"] == "true"} == {"Berlin", "Acme"}
    # The colour coding has a text alternative on every bar.
    label = page.locator('.bar-g[data-object="Berlin"]').first.get_attribute("aria-label")
    assert label is not None and "current" in label and "LIVES_IN Berlin" in label
    # A lower-trust claim against what Dave said is drawn, contested, and not true now.
    pick(page, "Dave")
    assert sorted((b["object"], b["status"], b["holds"]) for b in bars(page)) == [
        ("Milan", "contested", "false"),
        ("Rome", "current", "true"),
    ]
    assert page.errors == []  # type: ignore[attr-defined]
    close(page)


def test_the_cursors_show_what_was_true_then_as_known_then(
    served: Served, browser: Browser, shots: Path
) -> None:
    page = open_page(browser, served)
    pick(page, "Alice")
    with served.client("alice") as c:
        history = ok(c.get("/v1/history", params={"subject": "Alice"}))

        def as_of(valid: str | None, known: str | None) -> set[str]:
            q = {"subject": "Alice", "valid_at": valid, "known_at": known}
            found = ok(c.get("/v1/facts", params={k: v for k, v in q.items() if v}))
            return {version(f) for f in found}

        def holding() -> set[str]:
            ready(page)
            return {b["version"] for b in bars(page) if b["holds"] == "true"}

        # Valid-time cursor to 2021-03-01: Alice lived in Paris then.
        page.fill("#valid-date", "2021-03-01")
        page.dispatch_event("#valid-date", "change")
        expect(page.get_by_test_id("valid-at")).to_have_text("true at 2021-03-01")
        paris = as_of("2021-03-01T00:00:00Z", None)
        assert holding() == paris
        assert {b["object"] for b in bars(page) if b["holds"] == "true"} == {"Paris", "Acme"}

        # Known-at slider to its first step (keyboard: Home): only the first episode was known.
        page.focus("#known-at")
        page.keyboard.press("Home")
        first = min(v["known_from"] for v in history)
        expect(page.get_by_test_id("known-at")).to_contain_text("Alice's profile")  # its episode
        assert holding() == as_of("2021-03-01T00:00:00Z", first)
        known_then = [v for v in history if v["known_from"] <= first]
        assert sorted((b["object"], b["status"]) for b in bars(page)) == sorted(
            (v["object"], expected_status(v, first)) for v in known_then
        )
        assert "Berlin" not in {b["object"] for b in bars(page)}

        # Valid time now, still as known at the first step: Paris (not yet closed) and Acme.
        page.click("#valid-now")
        assert holding() == as_of(None, first)
        assert {b["object"] for b in bars(page) if b["holds"] == "true"} == {"Paris", "Acme"}

        # Back to now on both axes: Berlin.
        page.focus("#known-at")
        page.keyboard.press("End")
        assert holding() == as_of(None, None)
    close(page)


def test_a_correction_closes_the_old_value_through_the_timeline(
    served: Served, browser: Browser, shots: Path
) -> None:
    page = open_page(browser, served)
    pick(page, "Alice")
    page.locator('.bar-g[data-object="Acme"][data-status="current"]').click()
    why = page.locator("#why")
    expect(why.get_by_test_id("why-versions")).to_be_visible()
    expect(why.locator("article.episode")).to_have_count(1)
    expect(why.locator("article.episode dd").first).to_have_text("user")
    page.fill("#correct-value", "Globex")
    page.fill("#correct-since", "2024-02-01")
    page.click("#why form.correct button[type=submit]")
    expect(page.locator("#subject-status")).to_contain_text("Correction saved")
    ready(page)
    expect(page.locator('.bar-g[data-object="Globex"][data-status="current"]')).to_have_count(1)
    expect(page.locator('.bar-g[data-object="Acme"][data-status="closed"]')).to_have_count(1)
    with served.client("alice") as c:
        now = ok(c.get("/v1/facts", params={"subject": "Alice", "predicate": "WORKS_AT"}))
        assert [f["object"] for f in now] == ["Globex"]
        q = {"subject": "Alice", "predicate": "WORKS_AT", "valid_at": "2023-01-01T00:00:00Z"}
        then = ok(c.get("/v1/facts", params=q))
        assert [f["object"] for f in then] == ["Acme"]
        acme = [
            v
            for v in ok(c.get("/v1/history", params={"subject": "Alice"}))
            if v["object"] == "Acme" and not v["known_to"]
        ]
        assert [v["valid_to"] for v in acme] == ["2024-02-01T00:00:00Z"]
        closer = ok(c.get(f"/v1/episodes/{acme[0]['closed_by_episode_id']}"))
        assert (closer["channel"], closer["source"]) == ("user", "facts")
    close(page)


def test_rollback_from_the_why_panel_restores_what_the_poisoned_episode_closed(
    served: Served, browser: Browser, shots: Path
) -> None:
    page = open_page(browser, served)
    pick(page, "Bob")
    page.locator('.bar-g[data-object="Mars"]').click()
    card = page.locator("#why article.episode", has_text="forum post")
    card.get_by_role("button", name="Roll back…").click()
    dialog = page.locator("#dialog")
    expect(dialog.get_by_test_id("dry-run")).to_be_visible()
    expect(dialog.get_by_test_id("reopened")).to_contain_text(
        "Bob LIVES_IN Oslo: end 2023-01-01 removed"
    )
    expect(dialog.get_by_test_id("removed")).to_contain_text("Mars")
    with served.client("alice") as c:  # the dry run changed nothing
        assert [f["object"] for f in ok(c.get("/v1/facts", params={"subject": "Bob"}))] == ["Mars"]
    dialog.get_by_role("button", name="Apply rollback").click()
    expect(dialog.get_by_test_id("rollback-applied")).to_be_visible()
    page.keyboard.press("Escape")
    ready(page)
    expect(page.locator('.bar-g[data-object="Oslo"][data-holds="true"]')).to_have_count(1)
    with served.client("alice") as c:
        assert [f["object"] for f in ok(c.get("/v1/facts", params={"subject": "Bob"}))] == ["Oslo"]
    close(page)


def test_forget_needs_the_name_typed_and_shows_the_receipt(
    served: Served, browser: Browser, shots: Path
) -> None:
    page = open_page(browser, served)
    pick(page, "Carol")
    page.click("#erase-open")
    go = page.get_by_role("button", name="Erase for good")
    page.fill("#erase-confirm", "carol")
    expect(go).to_be_disabled()
    page.fill("#erase-confirm", "Carol")
    expect(go).to_be_enabled()
    go.click()
    receipt = page.get_by_test_id("receipt")
    expect(receipt).to_contain_text("episodes deleted")
    page.screenshot(path=str(shots / "erase-receipt.png"))
    with served.client("alice") as c:
        found = ok(c.post("/v1/search", json={"query": "Carol Lisbon", "include_closed": True}))
        assert not any("Carol" in (h.get("subject") or "") for h in found["hits"])
        assert not any(h.get("name") == "Carol" for h in found["hits"])
        assert ok(c.get("/v1/entities", params={"q": "carol"})) == []
    page.keyboard.press("Escape")
    expect(page.locator('#entity-list button[data-entity="Carol"]')).to_have_count(0)
    close(page)


def test_a_read_key_sees_no_write_controls_and_the_api_refuses_them(
    served: Served, browser: Browser
) -> None:
    page = open_page(browser, served, role="read")
    pick(page, "Alice")
    expect(page.locator("#erase-open")).to_have_count(0)
    page.locator(".bar-g[data-holds=true]").first.focus()  # keyboard: a bar, then Enter
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("why-versions")).to_be_visible()
    expect(page.locator("#why form.correct")).to_have_count(0)
    page.locator("#why").get_by_role("button", name="Preview rollback…").first.click()
    expect(page.get_by_test_id("dry-run")).to_be_visible()
    expect(page.get_by_role("button", name="Apply rollback")).to_have_count(0)
    page.keyboard.press("Escape")
    page.click('#tabs button[data-view="overview"]')
    expect(page.get_by_test_id("counts")).to_be_visible()
    expect(page.get_by_role("button", name="Retry")).to_have_count(0)
    fact = page.locator(".bar-g[data-holds=true]").first.get_attribute("data-version")
    close(page)
    with served.client("alice", "read") as c:
        r = c.post(
            f"/v1/facts/{fact}/correct", json={"object": "Rome", "valid_at": "2025-01-01T00:00:00Z"}
        )
        assert r.status_code == 403, r.text
        r = c.post("/v1/erase/entity", json={"subject": "Alice", "confirm": "Alice"})
        assert r.status_code == 403, r.text
        ep = ok(c.get("/v1/episodes"))[0]["id"]
        r = c.post("/v1/rollback", json={"episode_ids": [ep], "dry_run": False})
        assert r.status_code == 403, r.text


def test_search_shows_fused_hits_and_on_demand_each_branch(
    served: Served, browser: Browser, shots: Path
) -> None:
    page = open_page(browser, served)
    page.click('#tabs button[data-view="search"]')
    page.fill("#search-q", "Alice Berlin")
    page.click("#search-form button[type=submit]")
    hits = page.get_by_test_id("fact-hits")
    expect(hits).to_contain_text("Berlin")
    expect(page.get_by_test_id("branches")).to_have_count(0)
    page.check("#search-explain")
    expect(page.get_by_test_id("branches")).to_be_visible()
    expect(hits).to_contain_text("#1")
    page.click('#tabs button[data-view="overview"]')
    expect(page.get_by_test_id("episodes")).to_be_visible()
    expect(page.locator('[data-count="episodes"]')).not_to_have_text("0")
    close(page)


def test_one_element_registry_and_no_module_level_mutable_state() -> None:
    """The inspector's modules read the page's elements through dom.js only (no module of
    its own `$`), every name there is an id of index.html, and no module keeps mutable state
    of its own at its top level (it is in state.js's one object)."""
    static = Path(__file__).parents[1] / "kg" / "server" / "static"
    page = (static / "index.html").read_text()
    registry = (static / "dom.js").read_text()
    ids = re.findall(r'^\s+\w+: "([a-z0-9-]+)",$', registry, flags=re.M)
    templated = {"view-subject", "view-search", "view-overview"}
    assert ids and all(f'id="{i}"' in page for i in ids), "dom.js names an id the page lacks"
    for js in sorted(static.glob("*.js")):
        text = js.read_text()
        if js.name != "dom.js":
            assert "getElementById" not in text and "const $ =" not in text, js.name
            assert not re.search(r"querySelector(All)?\([\"`]#", text), f"{js.name}: an id"
        assert not re.search(r"^(let|var) ", text, flags=re.M), f"{js.name}: module-level let"
        used = set(re.findall(r"\bdom\.(\w+)", text)) - {"js"}  # ./dom.js itself
        names = set(re.findall(r"^\s+(\w+): \"", registry, flags=re.M))
        assert used <= names, f"{js.name} reads {used - names}, not in dom.js"
    assert templated <= set(ids)
