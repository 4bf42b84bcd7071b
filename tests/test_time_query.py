"""Time words in a query, trust and recency in ranking, and superseded facts in every branch."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from kg import KG
from kg.cli import render
from kg.ingest.embeddings import Embedder, local_minilm
from kg.retrieval import RECIPES, SearchConfig, SearchResults, render_context
from kg.retrieval.config import Fusion, Method, ScopeConfig
from kg.retrieval.dated import asks_when, says_when
from kg.retrieval.when import read_time
from kg.schemas.ontology import DEFAULT_ONTOLOGY, Decay, EntityType, Ontology, Predicate
from tests.conftest import add, t

ASKED = datetime(2024, 6, 12, 15, 30, tzinfo=UTC)  # a Wednesday
BM25 = SearchConfig(facts=ScopeConfig(methods=(Method.bm25,)))
EPISODES_BM25 = SearchConfig(facts=None, episodes=ScopeConfig(methods=(Method.bm25,)))


def d(y: int, m: int = 1, day: int = 1) -> datetime:
    return datetime(y, m, day, tzinfo=UTC)


# -- the parser -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "words", "start", "end"),
    [
        ("Where did Alice live in 2022?", "in 2022", d(2022), d(2023)),
        ("What did she say last March?", "last March", d(2024, 3), d(2024, 4)),
        ("what happened in March 2023", "in March 2023", d(2023, 3), d(2023, 4)),
        ("and in May?", "in May", d(2024, 5), d(2024, 6)),
        ("plans for next March", "next March", d(2025, 3), d(2025, 4)),
        ("what did I eat yesterday", "yesterday", d(2024, 6, 11), d(2024, 6, 12)),
        ("jobs since 2019", "since 2019", d(2019), None),
        ("before May 2021", "before May 2021", None, d(2021, 5)),
        ("after 2020, where", "after 2020", d(2021), None),
        ("last week", "last week", d(2024, 6, 3), d(2024, 6, 10)),
        ("this year", "this year", d(2024), d(2025)),
        ("what did he do 3 days ago", "3 days ago", d(2024, 6, 9), d(2024, 6, 10)),
        ("two weeks ago", "two weeks ago", d(2024, 5, 29), d(2024, 6, 5)),
        ("in the last 2 weeks", "in the last 2 weeks", d(2024, 5, 29), ASKED),
        ("on Tuesday", "on Tuesday", d(2024, 6, 11), d(2024, 6, 12)),
        ("the 2023-05-08 meeting", "2023-05-08", d(2023, 5, 8), d(2023, 5, 9)),
        ("shown on October 13, 2023?", "on October 13, 2023", d(2023, 10, 13), d(2023, 10, 14)),
        ("found on 1 February, 2023", "on 1 February, 2023", d(2023, 2, 1), d(2023, 2, 2)),
        ("volunteered last weekend", "last weekend", d(2024, 6, 8), d(2024, 6, 10)),
        ("작년 3월에 어디 살았어?", "작년 3월", d(2023, 3), d(2023, 4)),
        ("2022년에 어디서 일했어?", "2022년", d(2022), d(2023)),
        ("2021년 5월에", "2021년 5월", d(2021, 5), d(2021, 6)),
        ("지난주에 뭐 했어?", "지난주", d(2024, 6, 3), d(2024, 6, 10)),
        ("지난달 일", "지난달", d(2024, 5), d(2024, 6)),
        ("어제 뭐 먹었어", "어제", d(2024, 6, 11), d(2024, 6, 12)),
        ("2019년부터 다닌 회사", "2019년부터", d(2019), None),
        ("2주 전에 만난 사람", "2주 전", d(2024, 5, 29), d(2024, 6, 5)),
        ("최근 3개월 동안", "최근 3개월", d(2024, 3, 12), ASKED),
    ],
)
def test_time_words_become_a_window(
    query: str, words: str, start: datetime | None, end: datetime | None
) -> None:
    qt = read_time(query, ASKED)
    assert qt.applied is not None, qt.describe()
    assert (qt.applied.text, qt.applied.start, qt.applied.end) == (words, start, end)
    assert words not in qt.rest


@pytest.mark.parametrize(
    "query",
    [
        "Where does Alice live?",
        "What is 1000 + 2000?",
        "May I ask what you like?",
        "How many days are in a week?",
        "March on, she said",
        "the last weekender",
    ],
)
def test_no_time_words_no_window(query: str) -> None:
    qt = read_time(query, ASKED)
    assert qt.applied is None and qt.rest == query


@pytest.mark.parametrize(
    ("query", "event"),
    [
        ("Where did Alice work two weeks before she moved?", "she moved"),
        ("after he left Google what did he do", "he left Google"),
        ("이사하기 2주 전에 어디 있었어?", "이사하기"),
    ],
)
def test_event_anchored_forms_are_not_guessed(query: str, event: str) -> None:
    qt = read_time(query, ASKED)
    assert qt.applied is None
    [e] = qt.expressions
    assert (e.understood, e.anchor) == (False, event)
    assert "not understood" in qt.describe()[0]


# -- windows in the engine ------------------------------------------------------------------


async def test_a_year_in_the_query_filters_facts_on_validity(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    await add(kg, t(2023), ("Alice", "LIVES_IN", "Busan"))
    now = await kg.search("Where does Alice live?", config=BM25, asked_at=ASKED)
    assert [h.fact.object for h in now.facts] == ["Busan"] and now.time is None
    for query in ("Where did Alice live in 2021?", "Alice 2021년에 어디 살았어?"):
        then = await kg.search(query, config=BM25, asked_at=ASKED)
        assert [(h.fact.object, h.closed) for h in then.facts] == [("Seoul", True)], query
        assert then.view.window == (d(2021), d(2022))
        assert then.time is not None and then.time.applied is not None
    # The closed value is shown as history, never as current.
    assert "no longer true" in render_context(then)
    # Both years of a window that spans the change.
    both = await kg.search("Where did Alice live since 2022?", config=BM25, asked_at=ASKED)
    assert sorted(h.fact.object for h in both.facts) == ["Busan", "Seoul"]
    # Relative words are read against asked_at: 'last year' in 2021 is 2020.
    r = await kg.search("Where did Alice live last year?", config=BM25, asked_at=d(2021, 6))
    assert [h.fact.object for h in r.facts] == ["Seoul"]
    # Turned off, the same words are plain text and the default view holds.
    off = BM25.model_copy(update={"read_time": False})
    r = await kg.search("Where did Alice live in 2021?", config=off, asked_at=ASKED)
    assert [h.fact.object for h in r.facts] == ["Busan"] and r.time is None


async def test_a_window_boosts_episodes_said_in_it(kg: KG) -> None:
    for month, dish in ((2, "kimchi stew"), (3, "kimchi pancakes"), (4, "kimchi fried rice")):
        await kg.add_episode(
            source="message",
            content=f"Bob: I cooked {dish} with kimchi.",
            reference_time=d(2024, month, 10),
            extract=False,
        )
    plain = await kg.search("What did Bob cook with kimchi?", config=EPISODES_BM25)
    r = await kg.search(
        "What did Bob cook with kimchi last March?", config=EPISODES_BM25, asked_at=ASKED
    )
    assert len(r.episodes) == 3  # a boost, not a filter
    assert "pancakes" in r.episodes[0].episode.content and r.episodes[0].in_window
    assert not any(h.in_window for h in r.episodes[1:])
    assert "pancakes" not in plain.episodes[0].episode.content  # the boost made the difference


async def test_an_event_anchor_is_resolved_through_a_fact(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "WORKS_AT", "Naver"))
    await add(kg, t(2023, 5, 10), ("Alice", "MOVED_TO", "Busan"))
    await add(kg, t(2023, 6, 1), ("Alice", "WORKS_AT", "Kakao"))
    r = await kg.search(
        "Where did Alice work two weeks before Alice moved to Busan?", config=BM25, asked_at=ASKED
    )
    assert r.time is not None and r.time.applied is not None
    assert r.time.applied.window == (d(2023, 4, 26), d(2023, 5, 3))
    assert "Alice moved to Busan" in r.time.applied.note
    assert [h.fact.object for h in r.facts if h.fact.predicate == "WORKS_AT"] == ["Naver"]
    # No fact names the event: reported, and no window is guessed.
    r = await kg.search(
        "Where did Alice work two weeks before she married Bob?", config=BM25, asked_at=ASKED
    )
    assert r.time is not None and r.time.applied is None and r.view.window is None
    assert "no fact found" in r.time.expressions[0].note
    assert "Kakao" in [h.fact.object for h in r.facts]


async def test_explain_shows_how_time_words_were_read(kg: KG) -> None:
    await add(kg, t(2020), ("Alice", "LIVES_IN", "Seoul"))
    r = await kg.search("Where did Alice live in 2021?", config=BM25, asked_at=ASKED)
    console = Console(record=True, width=200)
    render.search(console, r, explain=True)
    text = console.export_text()
    assert "time words (asked at 2024-06-12 15:30Z)" in text
    assert "'in 2021' = [2021-01-01 → 2021-12-31] (applied: that year)" in text


# -- trust and recency ----------------------------------------------------------------------


async def test_an_agent_inference_ranks_below_the_users_word_until_confirmed(kg: KG) -> None:
    await add(kg, t(2024), ("Alice", "LIKES", "Green tea"), channel="agent")
    await add(kg, t(2024), ("Alice", "LIKES", "Black coffee"), channel="user")
    r = await kg.search("What does Alice like?", config=BM25)
    assert [(h.fact.object, h.trust_factor) for h in r.facts] == [
        ("Black coffee", 1.0),
        ("Green tea", 0.7),
    ]
    # The factor scales the fused (here reciprocal-rank) score.
    for h in r.facts:
        assert h.fused_score == pytest.approx(h.trust_factor / (60 + h.ranks["bm25"]))
    await add(kg, t(2024, 2), ("Alice", "LIKES", "Green tea"), channel="user")  # confirmed
    r = await kg.search("What does Alice like?", config=BM25)
    assert {h.fact.object: h.trust_factor for h in r.facts} == {
        "Black coffee": 1.0,
        "Green tea": 1.0,
    }
    # A document is confirmed by nothing lower than itself.
    await add(kg, t(2024), ("Bob", "LIKES", "Chess"), channel="document")
    await add(kg, t(2024, 2), ("Bob", "LIKES", "Chess"), channel="agent")
    r = await kg.search("What does Bob like?", config=BM25)
    assert [h.trust_factor for h in r.facts if h.fact.subject == "Bob"] == [0.85]


async def test_recency_decay_from_the_ontology_with_a_floor(home: Path) -> None:
    onto = Ontology(
        name="decay",
        entity_types=[
            *DEFAULT_ONTOLOGY.entity_types,
            EntityType(name="Pet", decay=Decay(half_life_days=10)),
        ],
        predicates=[
            *DEFAULT_ONTOLOGY.predicates,
            Predicate(name="ALLERGIC_TO", decay=Decay()),  # never fades
            Predicate(name="AVOIDS", decay=Decay(half_life_days=30, floor=0.8)),
        ],
        decay=Decay(half_life_days=30),
    )
    async with await KG.open(home=home, ontology=onto) as kg:
        await add(kg, d(2024, 3, 14), ("Alice", "LIKES", "Jazz"))  # 90 days before
        await add(kg, d(2024, 6, 12), ("Alice", "LIKES", "Rock"))
        await add(kg, d(2020), ("Alice", "ALLERGIC_TO", "Peanuts"))
        await add(kg, d(2020), ("Alice", "AVOIDS", "Pork"))
        await add(
            kg,
            d(2024, 6, 2),
            {"subject": "Rex", "predicate": "LIKES", "object": "Bones", "subject_type": "Pet"},
        )
        r = await kg.search("Alice", config=BM25, asked_at=d(2024, 6, 12))
        got = {h.fact.object: round(h.recency_factor, 3) for h in r.facts}
        assert got == {"Rock": 1.0, "Jazz": 0.125, "Peanuts": 1.0, "Pork": 0.8}
        assert r.facts[-1].fact.object == "Jazz"
        rex = await kg.search("Rex likes", config=BM25, asked_at=d(2024, 6, 12))
        [bones] = [h for h in rex.facts if h.fact.subject == "Rex"]
        assert bones.recency_factor == pytest.approx(0.5)  # the type's 10-day half-life
        # A restatement is what refreshes a fact.
        await add(kg, d(2024, 6, 12), ("Alice", "LIKES", "Jazz"))
        r = await kg.search("Alice likes", config=BM25, asked_at=d(2024, 6, 12))
        assert {h.fact.object: h.recency_factor for h in r.facts}["Jazz"] == 1.0


# -- superseded facts, every branch and reranker ---------------------------------------------


class Reverse:
    """A cross-encoder that prefers the shortest text: deterministic, no model."""

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        return [-float(len(x)) for x in texts]


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    return local_minilm()


@pytest.fixture
async def ekg(home: Path, minilm: Embedder) -> AsyncIterator[KG]:
    async with await KG.open(home=home, embedder=minilm, cross_encoder=Reverse()) as graph:
        yield graph


def _objects(r: SearchResults) -> list[str]:
    return [h.fact.object for h in r.facts]


async def test_superseded_facts_are_filtered_in_every_recipe(ekg: KG) -> None:
    await add(
        ekg,
        t(2020),
        ("Alice", "LIVES_IN", "Seoul"),
        ("Seoul", "LOCATED_IN", "Korea"),
        ("Alice", "KNOWS", "Bob"),
    )
    await add(ekg, t(2023), ("Alice", "LIVES_IN", "Busan"), ("Bob", "LIVES_IN", "Seoul"))
    recipes = [name for name, cfg in RECIPES.items() if cfg.facts is not None]
    assert {
        "facts_hybrid_bfs_rrf",
        "facts_hybrid_episode_mentions",
        "facts_hybrid_node_distance",
        "facts_hybrid_cross_encoder",
    } <= set(recipes)
    for recipe in recipes:
        for query in ("Alice lives in Seoul", "Where does Alice live?", "Seoul"):
            r = await ekg.search(
                query, recipe=recipe, limit=50, seeds=["Alice", "Seoul"], center="Alice"
            )
            current = [h for h in r.facts if h.fact.subject == "Alice"]
            assert "Seoul" not in [h.fact.object for h in current], (recipe, query)
            assert not any(h.closed for h in r.facts), (recipe, query)
    # BFS reaches Seoul through Bob's current fact, never through Alice's closed one.
    bfs = await ekg.search("Korea", recipe="facts_hybrid_bfs_rrf", seeds=["Alice"], limit=50)
    assert "Alice lives in Seoul" not in [h.fact.edge.fact for h in bfs.facts]
    # Only a time window or a history view brings it back, and then marked closed.
    r = await ekg.search("Where did Alice live in 2021?", recipe="facts_hybrid", asked_at=ASKED)
    assert [
        (h.fact.object, h.closed)
        for h in r.facts
        if h.fact.predicate == "LIVES_IN" and h.fact.subject == "Alice"
    ] == [("Seoul", True)]


# -- questions that ask when ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "asks"),
    [
        ("When did Caroline go to the LGBTQ support group?", True),
        ("In what year did Bo move?", True),
        ("Which month did Mina start?", True),
        ("민지는 언제 이사했어?", True),
        ("What did Caroline research?", False),
        ("Where does Bo work?", False),
    ],
)
def test_a_question_asks_when(question: str, asks: bool) -> None:
    assert asks_when(question) is asks


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("I went to a LGBTQ support group yesterday.", True),
        ("that roadtrip this past weekend", True),
        ("Let's do it next month", True),
        ("Last Friday I made a dessert", True),
        ("We moved in May 2022.", True),
        ("지난주에 부산에 갔어", True),
        ("How did it go?", False),
        ("I love painting sunsets.", False),
    ],
)
def test_a_turn_says_when(text: str, says: bool) -> None:
    assert says_when(text) is says


async def test_a_question_asking_when_lifts_the_turns_that_say_when(kg: KG) -> None:
    # LoCoMo's temporal questions are answered by the turn that dates the event in its own
    # words; the fused default ranked the turns phrased like the question above it.
    for text in (
        "Bob: Kimchi! I cooked kimchi, so much kimchi.",
        "Bob: I cooked kimchi yesterday after a long day at work.",
        "Bob: Hi Ann, long time no see.",
    ):
        await kg.add_episode(source="message", content=text, reference_time=ASKED, extract=False)
    fused = EPISODES_BM25.model_copy(update={"fusion": Fusion.score})  # as episodes_hybrid
    when = await kg.search("When did Bob cook kimchi?", config=fused)
    assert "yesterday" in when.episodes[0].episode.content
    off = fused.model_copy(update={"dated_boost": 0.0})
    plain = await kg.search("When did Bob cook kimchi?", config=off)
    assert "yesterday" not in plain.episodes[0].episode.content  # the boost made the difference
    what = await kg.search("What did Bob cook with kimchi?", config=fused)
    assert "yesterday" not in what.episodes[0].episode.content  # only a question asking when
    # Not on RRF's compressed scores, where it lifted any dated turn above every other.
    rrf = await kg.search("When did Bob cook kimchi?", config=EPISODES_BM25)
    assert "yesterday" not in rrf.episodes[0].episode.content
