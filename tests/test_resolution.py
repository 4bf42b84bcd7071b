"""Resolution: the one batched LLM call that settles ambiguous entities and facts.

Real embedded store; a scripted LLM answers both the extraction and the resolution calls,
so every test also checks *when* the resolution call happens and what it is shown.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kg import KG
from kg.ingest.embeddings import local_minilm
from kg.ingest.llm import Message, ScriptedLLM
from kg.schemas.embedder import Embedder
from tests.conftest import Backend, objects, open_test_kg, t
from tests.test_llm_ingest import f, reply, say


class RoutedLLM(ScriptedLLM):
    """Extraction replies from `_replies`, resolution replies from `resolutions`."""

    def __init__(self) -> None:
        super().__init__([])
        self.resolutions: list[str] = []

    async def _complete(self, messages: list[Message], schema: Any, name: str) -> Any:
        if name == "Resolution":
            if not self.resolutions:
                raise AssertionError(f"unexpected resolution call: {messages[1]['content']}")
            self._replies.insert(0, self.resolutions.pop(0))
        return await super()._complete(messages, schema, name)


Session = tuple[KG, RoutedLLM]


def resolution(
    entities: list[tuple[str, str | None]] = (), facts: list[dict[str, Any]] = ()
) -> str:
    return json.dumps(
        {
            "entities": [{"name": n, "same_as": e} for n, e in entities],
            "facts": list(facts),
        }
    )


def asked(llm: RoutedLLM) -> str:
    """The user message of the last resolution request."""
    [request] = [r for r in llm.requests if "You resolve a memory graph" in r[0]["content"]][-1:]
    return request[1]["content"]


@pytest.fixture
async def session(backend: Backend, home: Path) -> AsyncIterator[Session]:
    llm = RoutedLLM()
    async with await open_test_kg(backend, home, llm=llm) as kg:
        yield kg, llm


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    return local_minilm()


@pytest.fixture
async def embedded(backend: Backend, home: Path, minilm: Embedder) -> AsyncIterator[Session]:
    llm = RoutedLLM()
    async with await open_test_kg(backend, home, llm=llm, embedder=minilm) as kg:
        yield kg, llm


async def test_exact_names_and_unambiguous_facts_need_no_resolution_call(session: Session) -> None:
    kg, llm = session
    await say(
        kg,
        llm,
        "Minji: I live in Seoul.",
        t(2024, 1, 1),
        reply(f("Minji", "LIVES_IN", "Seoul", "I live in Seoul")),
    )
    r = await say(
        kg,
        llm,
        "Minji: I moved to Busan.",
        t(2024, 6, 1),
        reply(f("minji", "LIVES_IN", "Busan", "I moved to Busan")),
    )
    # The ontology settles the move (single-valued); 'minji' is an exact match.
    assert (r.summary.llm_calls, r.summary.facts_closed) == (1, 1)
    assert len(llm.requests) == 2


async def test_a_near_name_is_merged_into_the_existing_entity(session: Session) -> None:
    kg, llm = session
    await say(
        kg,
        llm,
        "Minji Kim: I work at Naver.",
        t(2024, 1, 1),
        reply(f("Minji Kim", "WORKS_AT", "Naver", "I work at Naver")),
    )
    llm.resolutions.append(resolution([("N1", "E1")]))
    r = await say(
        kg,
        llm,
        "Minji: I like jazz.",
        t(2024, 2, 1),
        reply(f("Minji", "LIKES", "Jazz", "I like jazz")),
    )
    assert "N1: 'Minji'" in asked(llm) and "E1 = 'Minji Kim'" in asked(llm)
    assert (r.summary.llm_calls, r.summary.entities_merged, r.summary.entities_added) == (2, 1, 1)
    assert objects(await kg.facts(subject="Minji Kim")) == ["Jazz", "Naver"]
    assert (await kg.stats()).entities == 3  # Minji Kim, Naver, Jazz: no second Minji


async def test_ingest_and_search_never_list_every_group(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing groups scans the store on Neo4j; the write and search paths ask only whether
    their own group exists (an index lookup)."""
    kg, llm = session
    listed: list[str] = []
    real = kg.store.groups

    async def groups() -> list[str]:
        listed.append("groups")
        return await real()

    monkeypatch.setattr(kg.store, "groups", groups)
    await say(
        kg,
        llm,
        "Minji Kim: I work at Naver.",
        t(2024, 1, 1),
        reply(f("Minji Kim", "WORKS_AT", "Naver", "I work at Naver")),
    )
    llm.resolutions.append(resolution([("N1", "E1")]))
    r = await say(
        kg,
        llm,
        "Minji: I like jazz.",
        t(2024, 2, 1),
        reply(f("Minji", "LIKES", "Jazz", "I like jazz")),
    )
    assert r.summary.entities_merged == 1  # the group was found: resolution ran
    await kg.search("jazz")
    await kg.flush_metrics()
    assert listed == []


async def test_model_saying_no_keeps_the_entities_apart(session: Session) -> None:
    kg, llm = session
    await say(
        kg,
        llm,
        "Minji Kim: I work at Naver.",
        t(2024, 1, 1),
        reply(f("Minji Kim", "WORKS_AT", "Naver", "I work at Naver")),
    )
    llm.resolutions.append(resolution([("N1", None)]))
    r = await say(
        kg,
        llm,
        "Minji Park: I like jazz.",
        t(2024, 2, 1),
        reply(f("Minji Park", "LIKES", "Jazz", "I like jazz")),
    )
    assert r.summary.entities_merged == 0
    assert objects(await kg.facts(subject="Minji Park")) == ["Jazz"]
    assert (await kg.stats()).entities == 4


async def test_a_duplicate_in_other_words_reinforces_instead_of_adding(session: Session) -> None:
    kg, llm = session
    await say(
        kg,
        llm,
        "Minji: I enjoy jazz.",
        t(2024, 1, 1),
        reply(f("Minji", "ENJOYS", "Jazz", "I enjoy jazz")),
    )
    llm.resolutions.append(resolution(facts=[{"fact": "F1", "duplicate_of": "X1"}]))
    r = await say(
        kg,
        llm,
        "Minji: I like jazz a lot.",
        t(2024, 2, 1),
        reply(f("Minji", "LIKES", "Jazz", "I like jazz")),
    )
    assert "X1: 'Minji ENJOYS Jazz'" in asked(llm)
    s = r.summary
    assert (s.facts_merged, s.facts_reinforced, s.facts_added) == (1, 1, 0)
    [only] = await kg.facts(subject="Minji")
    assert only.predicate == "ENJOYS" and len(only.edge.episodes) == 2


async def test_a_contradiction_closes_the_old_fact_and_rollback_reopens_it(
    session: Session,
) -> None:
    kg, llm = session
    await say(
        kg,
        llm,
        "Minji: I work at Naver.",
        t(2024, 1, 1),
        reply(f("Minji", "WORKS_AT", "Naver", "I work at Naver")),
    )
    llm.resolutions.append(resolution(facts=[{"fact": "F1", "contradicts": ["X1"]}]))
    quit_ = await say(
        kg,
        llm,
        "Minji: I quit Naver last month.",
        t(2024, 6, 15),
        reply(f("Minji", "QUIT", "Naver", "I quit Naver", "last month")),
    )
    assert (quit_.summary.facts_contradicted, quit_.summary.facts_closed) == (1, 1)
    assert objects(await kg.facts(subject="Minji")) == ["Naver"]  # only QUIT now
    [now] = await kg.facts(subject="Minji")
    assert now.predicate == "QUIT"
    [closed] = [
        v.edge
        for v in await kg.history(subject="Minji", predicate="WORKS_AT")
        if v.edge.expired_at is None
    ]
    assert closed.invalid_at == t(2024, 5, 1)  # 'last month' = May, per relative_time
    assert closed.invalidated_by == quit_.episode_uuid
    assert [f.predicate for f in await kg.facts(subject="Minji", valid_at=t(2024, 3))] == [
        "WORKS_AT"
    ]
    # Rollback replays the stored, already resolved record: no LLM, and Naver is back.
    calls = len(llm.requests)
    report = await kg.rollback(quit_.episode_uuid, dry_run=False)
    assert report.applied and len(llm.requests) == calls
    [back] = await kg.facts(subject="Minji")
    assert (back.predicate, back.edge.invalid_at) == ("WORKS_AT", None)


async def test_a_low_trust_contradiction_cannot_close_a_user_fact(session: Session) -> None:
    kg, llm = session
    await say(
        kg,
        llm,
        "Minji: I work at Naver.",
        t(2024, 1, 1),
        reply(f("Minji", "WORKS_AT", "Naver", "I work at Naver")),
    )
    llm.resolutions.append(resolution(facts=[{"fact": "F1", "contradicts": ["X1"]}]))
    web = await say(
        kg,
        llm,
        "Gossip page: Minji left Naver.",
        t(2024, 3, 1),
        reply(f("Minji", "LEFT", "Naver", "Minji left Naver")),
        source="text",
        channel="document",
    )
    assert web.summary.facts_closed == 0 and web.summary.facts_contested == 1
    assert "WORKS_AT" in [x.predicate for x in await kg.facts(subject="Minji")]


async def test_an_older_contradicting_fact_ends_where_the_stored_one_starts(
    session: Session,
) -> None:
    kg, llm = session
    await say(
        kg,
        llm,
        "Minji: I work at Naver since March.",
        t(2024, 6, 1),
        reply(f("Minji", "WORKS_AT", "Naver", "I work at Naver", "2024-03-01")),
    )
    llm.resolutions.append(resolution(facts=[{"fact": "F1", "contradicts": ["X1"]}]))
    r = await say(
        kg,
        llm,
        "Minji: back in 2023 I was unemployed at Naver's rival.",
        t(2024, 7, 1),
        reply(f("Minji", "UNEMPLOYED_BY", "Naver", "I was unemployed", "2023-01-01")),
    )
    assert r.summary.facts_closed == 0  # the stored, later fact stays open
    [older] = await kg.facts(subject="Minji", valid_at=t(2023, 6))
    assert (older.predicate, older.edge.invalid_at) == ("UNEMPLOYED_BY", t(2024, 3, 1))
    assert [x.predicate for x in await kg.facts(subject="Minji")] == ["WORKS_AT"]


async def test_ids_the_model_was_not_shown_are_ignored(session: Session) -> None:
    kg, llm = session
    await say(
        kg,
        llm,
        "Minji Kim: I work at Naver.",
        t(2024, 1, 1),
        reply(f("Minji Kim", "WORKS_AT", "Naver", "I work at Naver")),
    )
    llm.resolutions.append(
        resolution([("N1", "E7"), ("N9", "E1")], [{"fact": "F1", "contradicts": ["X1", "X5"]}])
    )
    r = await say(
        kg,
        llm,
        "Minji: I like jazz.",
        t(2024, 2, 1),
        reply(f("Minji", "LIKES", "Jazz", "I like jazz")),
    )
    s = r.summary
    assert (s.entities_merged, s.facts_contradicted, s.facts_closed) == (0, 0, 0)
    assert objects(await kg.facts(subject="Minji Kim")) == ["Naver"]


async def test_a_failed_resolution_still_lands_the_episode_within_budget(
    session: Session,
) -> None:
    kg, llm = session
    await say(
        kg,
        llm,
        "Minji Kim: I work at Naver.",
        t(2024, 1, 1),
        reply(f("Minji Kim", "WORKS_AT", "Naver", "I work at Naver")),
    )
    llm.resolutions += ["nonsense", "still nonsense"]
    r = await say(
        kg,
        llm,
        "Minji: I like jazz.",
        t(2024, 2, 1),
        reply(f("Minji", "LIKES", "Jazz", "I like jazz")),
    )
    assert r.summary.llm_calls == 3 and "did not match Resolution" in (
        r.summary.resolution_error or ""
    )
    assert objects(await kg.facts(subject="Minji")) == ["Jazz"]  # resolved by exact names
    # Extraction needed its retry: resolution gets one attempt, so never more than 3 calls.
    llm._replies.append('{"facts": 1}')
    llm.resolutions += ["nonsense", "unused"]
    r = await say(
        kg,
        llm,
        "Minji Lee: I like tea.",
        t(2024, 3, 1),
        reply(f("Minji Lee", "LIKES", "Tea", "I like tea")),
    )
    assert llm.resolutions == ["unused"]
    assert r.summary.llm_calls == 3 and r.summary.resolution_error


async def test_a_similar_fact_about_someone_else_is_never_a_candidate(embedded: Session) -> None:
    kg, llm = embedded
    await say(
        kg,
        llm,
        "Jisoo: I moved to Busan.",
        t(2024, 1, 1),
        reply(f("Jisoo", "MOVED_TO", "Busan", "I moved to Busan")),
    )
    await say(
        kg,
        llm,
        "Minji: I live in Seoul.",
        t(2024, 1, 1),
        reply(f("Minji", "LIVES_IN", "Seoul", "I live in Seoul")),
    )
    # "Jisoo moved to Busan" reads almost the same and shares Busan; it is not about Minji.
    # The model would close anything it is shown; it is shown only Minji's fact.
    llm.resolutions.append(resolution(facts=[{"fact": "F1", "contradicts": ["X1", "X2"]}]))
    r = await say(
        kg,
        llm,
        "Minji: I moved to Busan.",
        t(2024, 6, 1),
        reply(f("Minji", "MOVED_TO", "Busan", "I moved to Busan")),
    )
    shown = asked(llm)
    assert "Minji lives in Seoul" in shown or "Minji LIVES_IN Seoul" in shown
    assert "Jisoo" not in shown and "X2" not in shown
    assert r.summary.facts_closed == 1
    assert objects(await kg.facts(subject="Jisoo")) == ["Busan"]
    assert objects(await kg.facts(subject="Minji")) == ["Busan"]


async def test_a_name_close_by_embedding_is_offered(embedded: Session) -> None:
    kg, llm = embedded
    moved = f("Minji", "LIVES_IN", "New York City", "I moved to New York City")
    await say(kg, llm, "Minji: I moved to New York City.", t(2024, 1, 1), reply(moved))
    llm.resolutions.append(resolution([("N1", "E1")]))
    r = await say(
        kg, llm, "Minji: NYC is loud.", t(2024, 2, 1), reply(f("NYC", "IS", "Loud", "NYC is loud"))
    )
    assert "E1 = 'New York City'" in asked(llm)
    assert r.summary.entities_merged == 1
    assert objects(await kg.facts(subject="New York City")) == ["Loud"]
