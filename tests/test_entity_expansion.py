"""Entity expansion of episode search (kg.retrieval.entities): a question naming an entity
brings in the turns its facts cite, though they share no word with the question; a group
without facts reads nothing more."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from kg import KG
from kg.ingest.embeddings import Embedder, local_minilm
from kg.ingest.llm import Message, StructuredLLM
from kg.retrieval import SearchConfig
from kg.retrieval.config import SCORE_WEIGHTS, Fusion, Method, ScopeConfig
from tests.conftest import Backend, open_test_kg, t

# Turns of one session and the facts drawn from each (subject, predicate, object, sentence).
# The answer to "What does Caroline do to unwind?" is the canvas turn: neither it, the turn
# before it, nor its fact shares a word with the question.
CANVAS = "Caroline: Finished another canvas last night!"
TURNS: dict[str, list[tuple[str, str, str, str]]] = {
    "Caroline: What do you do after work, Melanie?": [],
    "Melanie: After work I do yoga, it helps me unwind.": [
        ("Melanie", "PRACTISES", "yoga", "Melanie practises yoga after work")
    ],
    "Caroline: I do not unwind easily after work.": [],
    "Melanie: The weather was lovely today.": [],
    CANVAS: [("Caroline", "ENJOYS", "painting", "Painting relaxes her")],
    "Melanie: My car broke down on the highway.": [
        ("Melanie", "OWNS", "car", "Melanie's car broke down on the highway")
    ],
}
QUESTION = "What does Caroline do to unwind?"


class TableLLM(StructuredLLM):
    """Extraction by table (TURNS), quoting the turn's own words; no merges."""

    model = "facts-by-table"

    async def _complete(
        self, messages: list[Message], schema: type[BaseModel], name: str
    ) -> tuple[str, int, int]:
        if name != "Extraction":
            return "{}", 1, 1
        episode = messages[-1]["content"].split("EPISODE:\n", 1)[-1].strip()
        quote = episode.split(": ", 1)[-1]
        facts = [
            {"subject": s, "predicate": p, "object": o, "fact": f, "quote": quote}
            for s, p, o, f in TURNS.get(episode, [])
        ]
        return json.dumps({"entities": [], "facts": facts}), 1, 1


def config(boost: float, limit: int = 2) -> SearchConfig:
    """episodes_hybrid, its top `limit`, with the entity expansion at `boost`."""
    return SearchConfig(
        facts=None,
        episodes=ScopeConfig(methods=(Method.bm25, Method.cosine), limit=limit),
        fusion=Fusion.score,
        weights=SCORE_WEIGHTS,
        entity_boost=boost,
    )


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    return local_minilm()


@pytest.fixture
async def kg(backend: Backend, home: Path, minilm: Embedder) -> AsyncIterator[KG]:
    async with await open_test_kg(backend, home, embedder=minilm, llm=TableLLM()) as graph:
        yield graph


async def ingest(kg: KG, *, extract: bool, group: str = "default") -> None:
    for i, text in enumerate(TURNS):
        await kg.add_episode(
            source="message",
            content=text,
            reference_time=t(2023, 5, 1 + i),
            group_id=group,
            session_id="s1",
            extract=extract and bool(TURNS[text]),
        )


def contents(found: Any) -> list[str]:
    return [h.episode.content for h in found.episodes]


async def test_a_named_entity_brings_in_the_turn_its_fact_cites(kg: KG) -> None:
    await ingest(kg, extract=True)
    off = await kg.search(QUESTION, config=config(0.0))
    assert CANVAS not in contents(off)
    on = await kg.search(QUESTION, config=config(1.0))
    assert CANVAS in contents(on)
    [report] = [b for b in on.branches if b.method == "entities"]
    assert report.hits > 0


READS = (
    "search_text",
    "search_vector",
    "rank_text",
    "rank_vector",
    "text_ceiling",
    "items",
    "turn_neighbours",
    "neighbourhood",
    "facts_between",
    "episodes_mentioning_any",
    "entities_by_uuid",
    "mention_counts",
    "embeddings",
    "episodes",
)


async def test_a_group_without_facts_reads_nothing_more(
    kg: KG, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ingest(kg, extract=False, group="raw")
    calls: list[str] = []
    for name in READS:
        read = getattr(kg.store, name)

        async def spy(*args: Any, _read: Any = read, _name: str = name, **kwargs: Any) -> Any:
            calls.append(f"{_name} {args[1] if len(args) > 1 else ''}")
            return await _read(*args, **kwargs)

        monkeypatch.setattr(kg.store, name, spy)
    off = await kg.search(QUESTION, group_id="raw", config=config(0.0))
    reads_off = sorted(calls)
    calls.clear()
    on = await kg.search(QUESTION, group_id="raw", config=config(1.0))
    assert sorted(calls) == reads_off  # the same reads, one each: none of entities or facts
    assert contents(on) == contents(off)
    assert [h.score for h in on.episodes] == [h.score for h in off.episodes]
    assert "entities" not in {b.method for b in on.branches}


async def test_a_fact_in_view_lifts_only_the_episodes_in_view(kg: KG) -> None:
    # The painting fact is restated by a later turn, appended to the same version: asked as
    # known before that turn was written, the fact is in view but the later turn is not.
    await ingest(kg, extract=True)
    before = kg.clock.now()
    later = "Caroline: Painted the harbour at dusk, so calming."
    TURNS[later] = TURNS[CANVAS]
    try:
        await kg.add_episode(
            source="message", content=later, reference_time=t(2023, 6, 1), session_id="s2"
        )
    finally:
        del TURNS[later]
    wide = config(1.0, limit=10)
    assert later in contents(await kg.search(QUESTION, config=wide))
    then = await kg.search(QUESTION, config=wide, known_at=before)
    assert CANVAS in contents(then)
    assert later not in contents(then)
    # The same for a valid time before it was said.
    said = await kg.search(QUESTION, config=wide, valid_at=t(2023, 5, 20))
    assert CANVAS in contents(said)
    assert later not in contents(said)
