"""Episode search keys (kg.search_keys): an episode is found by the turn before it in its
session, its content and, once extracted, its facts; rollback, erasure, the queue and import
keep every key true to what is in the log."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from pydantic import BaseModel

from kg import KG
from kg.ingest.embeddings import Embedder, local_minilm
from kg.ingest.llm import Message, StructuredLLM
from kg.ingest.structured import episodic_node, new_uuid
from kg.planners import RAW_EXTRACTOR
from kg.queue import Worker
from kg.schemas.episode import Episode
from kg.schemas.search import Scope
from kg.store.cypher.dialect import Statement
from tests.conftest import Backend, open_test_kg, t
from tests.store_probe import graph_dump

# Turns of one session, and the facts an extractor draws from each (subject, predicate,
# object, sentence). The answer to "Who plans to adopt a child?" shares no word with the turn.
ADOPT = "Caroline: Busy! Researching agencies all week."
TURNS = {
    "Melanie: How have you been lately?": [],
    ADOPT: [("Caroline", "PLANS", "adoption", "Caroline plans to adopt a child")],
    "Melanie: I finally painted the lake at sunrise.": [
        ("Melanie", "PAINTED", "lake", "Melanie painted a sunrise over a lake")
    ],
    "Caroline: That sounds lovely, send me a photo.": [],
}


class FactLLM(StructuredLLM):
    """Extraction by table (TURNS), quoting the turn's own words; no merges."""

    model = "facts-by-table"

    async def _complete(
        self, messages: list[Message], schema: type[BaseModel], name: str
    ) -> tuple[str, int, int]:
        if name != "Extraction":
            return "{}", 1, 1
        episode = messages[-1]["content"].split("EPISODE:\n", 1)[-1].strip()
        quote = episode.split(": ", 1)[1]
        facts = [
            {"subject": s, "predicate": p, "object": o, "fact": f, "quote": quote}
            for s, p, o, f in TURNS.get(episode, [])
        ]
        return json.dumps({"entities": [], "facts": facts}), 1, 1


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    return local_minilm()


@pytest.fixture
async def kg(backend: Backend, home: Path, minilm: Embedder) -> AsyncIterator[KG]:
    async with await open_test_kg(backend, home, embedder=minilm, llm=FactLLM()) as graph:
        yield graph


async def keys(kg: KG, group: str = "default") -> dict[str, str]:
    """content -> search key of the group's episodes."""
    rows = await kg.store.raw_query(
        group,
        "MATCH (ep:Episodic) WHERE ep.group_id = $g RETURN ep.content AS c, ep.search_key AS k",
        {"g": group},
    )
    return {r["c"]: r["k"] for r in rows}


async def ingest(
    kg: KG, *, extract: bool = True, session: str | None = "s1", group: str = "default"
) -> dict[str, str]:
    """TURNS a minute apart; content -> episode uuid."""
    out = {}
    for i, text in enumerate(TURNS):
        r = await kg.add_episode(
            source="message",
            content=text,
            reference_time=t(2023, 5, 1 + i),
            group_id=group,
            session_id=session,
            extract=extract and bool(TURNS[text]),
        )
        out[text] = r.episode_uuid
    return out


async def key_vector_matches(kg: KG, minilm: Embedder, uuid: str, text: str) -> bool:
    """The stored key embedding is the embedding of `text` (the key as it is now)."""
    stored = (await kg.store.embeddings("default", Scope.episodes, [uuid]))[uuid]
    [expected] = await minilm.embed([text])
    return bool(np.allclose(stored, expected, atol=1e-4))


async def test_a_fact_phrased_question_finds_the_turn_whose_words_differ(kg: KG) -> None:
    await ingest(kg)
    await ingest(kg, extract=False, session=None, group="raw")  # the same turns, no keys
    key = (await keys(kg))[ADOPT]
    assert key.splitlines() == [
        "Melanie: How have you been lately?",
        ADOPT,
        "Caroline plans to adopt a child",
    ]
    question = "Who plans to adopt a child?"
    for recipe in ("episodes_bm25", "episodes_hybrid"):
        found = await kg.search(question, recipe=recipe)
        assert found.episodes[0].episode.content == ADOPT, recipe
        assert "Caroline plans" not in found.episodes[0].episode.content  # content untouched
    # Indexed by their content alone, the words of the question find nothing.
    raw = await kg.search(question, group_id="raw", recipe="episodes_bm25")
    assert ADOPT not in [h.episode.content for h in raw.episodes]


async def test_rollback_takes_the_facts_and_the_turn_out_of_every_key(
    kg: KG, minilm: Embedder
) -> None:
    ids = await ingest(kg)
    after = list(TURNS)[2]
    assert ADOPT in (await keys(kg))[after]  # the turn before it
    await kg.rollback(ids[ADOPT], dry_run=False)
    now = await keys(kg)
    assert now[ADOPT] == ADOPT  # rolled back: its content alone, its facts gone
    assert now[after].splitlines() == [
        "Melanie: How have you been lately?",
        after,
        "Melanie painted a sunrise over a lake",
    ]
    assert await key_vector_matches(kg, minilm, ids[after], now[after])
    found = await kg.search("Who plans to adopt a child?", recipe="episodes_bm25")
    assert ADOPT not in [h.episode.content for h in found.episodes]


async def test_erasure_leaves_the_name_in_no_key(kg: KG, minilm: Embedder) -> None:
    await ingest(kg)
    secret = "Zebulon Quisling"
    said = await kg.add_episode(
        source="message",
        content=f"Melanie: {secret} wants to adopt a child too.",
        reference_time=t(2023, 5, 10),
        session_id="s1",
        extract=False,
    )
    reply = await kg.add_episode(
        source="message",
        content="Caroline: We should all meet up then.",
        reference_time=t(2023, 5, 11),
        session_id="s1",
        extract=False,
    )
    # The name is an entity only through another episode's fact.
    await kg.add_episode(
        source="facts",
        reference_time=t(2023, 5, 12),
        facts=[{"subject": secret, "predicate": "KNOWS", "object": "Caroline"}],
    )
    assert secret in (await keys(kg))["Caroline: We should all meet up then."]
    receipt = await kg.erase_entity(secret)
    assert receipt.episodes_deleted == 2
    now = await keys(kg)
    assert said.episode_uuid not in str(await graph_dump(kg))
    assert "quisling" not in await graph_dump(kg)
    last = list(TURNS)[-1]
    reply_key = now["Caroline: We should all meet up then."]
    assert reply_key.splitlines() == [last, "Caroline: We should all meet up then."]
    assert await key_vector_matches(kg, minilm, reply.episode_uuid, reply_key)


async def test_queued_turns_are_keyed_by_their_neighbour_then_by_their_facts(
    kg: KG, minilm: Embedder
) -> None:
    first, second = list(TURNS)[:2]
    a = await kg.add_episode(
        source="message", content=first, reference_time=t(2023, 5, 1), session_id="s1", wait=False
    )
    b = await kg.add_episode(
        source="message", content=second, reference_time=t(2023, 5, 2), session_id="s1", wait=False
    )
    assert (await keys(kg))[second] == f"{first}\n{second}"  # searchable before extraction
    found = await kg.search("How have you been lately?", recipe="episodes_bm25")
    assert {h.episode.uuid for h in found.episodes} == {a.episode_uuid, b.episode_uuid}
    await Worker(kg).drain()
    key = (await keys(kg))[second]
    assert key == f"{first}\n{second}\nCaroline plans to adopt a child"
    assert await key_vector_matches(kg, minilm, b.episode_uuid, key)


async def test_an_import_keeps_keys_and_keys_an_old_export_by_content(kg: KG) -> None:
    await ingest(kg)
    lines = [line async for line in kg.export_lines()]
    await kg.import_lines(lines, into="copy")
    assert await keys(kg, "copy") == await keys(kg)
    old = []  # an export written before keys: no search_key, no key_embedding
    for line in lines:
        record = json.loads(line)
        if record.get("record") == "episodes":
            record.pop("search_key", None)
            record.pop("key_embedding", None)
        old.append(json.dumps(record))
    await kg.import_lines(old, into="old")
    assert await keys(kg, "old") == {c: c for c in TURNS}
    found = await kg.search("finally painted", group_id="old", recipe="episodes_hybrid")
    assert found.episodes[0].episode.content == list(TURNS)[2]


async def test_a_store_written_before_keys_is_keyed_by_content_when_reopened(
    kg: KG, backend: Backend, home: Path, minilm: Embedder
) -> None:
    store = kg.store
    uuids = {}
    for i, text in enumerate(TURNS):  # as kg wrote episodes before keys: no key, no key vector
        node = episodic_node(
            Episode(source="message", content=text, reference_time=t(2023, 5, 1 + i)),
            uuid=new_uuid(),
            now=t(2023, 6, 1 + i),
            extractor=RAW_EXTRACTOR,
        )
        [vector] = await minilm.embed([text])
        await store.execute(
            "default",
            [  # type: ignore[attr-defined]
                Statement(
                    "CREATE (ep:Episodic) SET ep += $episode", {"episode": store._encode(node)}
                ),  # type: ignore[attr-defined]
                *store._vectors(
                    "v",
                    "(ep:Episodic {uuid: r.uuid})",  # type: ignore[attr-defined]
                    "ep.content_embedding",
                    "default",
                    [(node.uuid, vector)],
                ),
            ],
        )
        uuids[text] = node.uuid
    assert set((await keys(kg)).values()) == {None}
    await kg.close()
    async with await open_test_kg(backend, home, embedder=minilm) as again:
        for recipe in ("episodes_bm25", "episodes_cosine"):
            found = await again.search("finally painted the lake", recipe=recipe)
            assert found.episodes[0].episode.content == list(TURNS)[2], recipe
        assert await keys(again) == {c: c for c in TURNS}
        assert await key_vector_matches(again, minilm, uuids[ADOPT], ADOPT)
