"""The analyzer and BM25 rescoring: pure functions, checked against hand-computed values."""

from __future__ import annotations

import math

import pytest
import snowballstemmer

from kg.store.cypher.analyzer import grams, query_terms
from kg.store.cypher.bm25 import bm25, idf, query_tokens, split_rare, stem, tokens, upper_bound


def test_korean_runs_become_bigrams_and_latin_text_does_not() -> None:
    assert grams("민지는 부산으로") == "민지 지는 부산 산으 으로"
    assert grams("Minji lives in Busan") == ""
    assert set(grams("부산에").split()) & set(grams("부산으로").split()) == {"부산"}


def test_query_terms_are_plain_words_whatever_the_input() -> None:
    assert query_terms('lives-in "Busan" OR @x AND (y)') == ["lives", "in", "busan", "or", "and"]
    assert query_terms("부산에") == ["부산에", "부산", "산에"]
    assert query_terms("?!  ") == []


@pytest.mark.parametrize(
    ("word", "stemmed"),
    [
        ("painted", "paint"),
        ("paints", "paint"),
        ("painting", "paint"),
        ("stopped", "stop"),
        ("stories", "stori"),
        ("cats", "cat"),
        ("is", "is"),
        ("bus", "bus"),
        ("부산에", "부산에"),
        ("boxes", "box"),
        ("buses", "buse"),
        ("glass", "glass"),
        ("glasses", "glass"),
        ("families", "famili"),
        ("focused", "focus"),
        ("gps", "gps"),
    ],
)
def test_stem(word: str, stemmed: str) -> None:
    assert stem(word) == stemmed


@pytest.mark.parametrize(
    "forms",
    [
        ("live", "lives", "lived", "living"),
        ("game", "games"),
        ("move", "moved", "moving"),
        ("agree", "agreed", "agrees"),
        ("house", "houses"),
        ("class", "classes"),
        ("movie", "movies"),
        ("cookie", "cookies"),
        ("story", "stories"),
        ("study", "studies", "studied", "studying"),
        ("tattoo", "tattoos", "tattooed"),
        ("cliff", "cliffs"),
        ("time", "times", "timed", "timing"),
        ("hope", "hoped", "hoping"),
        ("plan", "plans", "planned", "planning"),
        ("hike", "hiked", "hiking"),
        ("make", "making", "makes"),
    ],
)
def test_a_word_and_its_forms_stem_alike(forms: tuple[str, ...]) -> None:
    # "Where does Minji live?" scored 0 on "Minji lives in Busan": 'live' vs 'liv'.
    assert len({stem(w) for w in forms}) == 1, [stem(w) for w in forms]


@pytest.mark.parametrize(
    "forms", [("family", "families"), ("focus", "focused", "focusing"), ("buses", "buse")]
)
def test_the_stem_is_the_engines_snowball_stem(forms: tuple[str, ...]) -> None:
    # RediSearch stems with Snowball's English stemmer: a BM25 token that differs from the
    # engine's term scores 0 on a document the engine matched ('family' was 'fami' and
    # 'families' 'famili'; 'focus' was 'focu' and 'focused' 'focus').
    english = snowballstemmer.stemmer("english")
    assert {stem(w) for w in forms} == {english.stemWord(forms[0])}


@pytest.mark.parametrize(
    "words",
    [
        ("tim", "time"),
        ("car", "care"),
        ("hop", "hope"),
        ("plan", "plane"),
        ("win", "wine"),
        ("her", "here"),
        ("them", "theme"),
        ("jam", "james"),
    ],
)
def test_a_short_word_and_the_word_with_an_e_stay_apart(words: tuple[str, str]) -> None:
    # "What did Tim ...?" matched every turn that says "time" (LoCoMo's conv-43 is Tim's).
    assert len({stem(w) for w in words}) == 2, [stem(w) for w in words]


def test_bm25_prefers_rare_terms_over_common_ones() -> None:
    docs = ["Melanie: did you make that?", "Caroline: I went to a LGBTQ support group", "did it"]
    terms = [tok for _, tok in query_tokens(query_terms("When did Caroline go to the LGBTQ group"))]
    df = {"when": 0, "did": 2, "caroline": 1, "go": 0, "lgbtq": 1, "group": 1}
    scores = bm25(terms, docs, df, n=3)
    assert max(range(3), key=lambda i: scores[i]) == 1


def test_bm25_matches_the_formula() -> None:
    # One term, tf = 2 in a document of length 4, average length 4 over two documents.
    [s, zero] = bm25(["jazz"], ["jazz jazz music loud", "piano solo tune soft"], {"jazz": 1}, n=10)
    expected = idf(1, 10) * 2 * 2.2 / (2 + 1.2 * (1 - 0.75 + 0.75 * 4 / 4))
    assert s == pytest.approx(expected) and zero == 0.0
    assert idf(1, 10) == pytest.approx(math.log(1 + 9.5 / 1.5))
    assert idf(10, 10) > 0  # a term in every document still counts a little


def test_stop_words_do_not_reach_the_index_or_the_score() -> None:
    assert [t for t, _ in query_tokens(["the", "jazz", "to"])] == ["jazz"]
    assert tokens("The painted Jazz") == ["paint", "jazz"]


def test_the_rarest_terms_are_asked_first_and_common_ones_set_aside() -> None:
    pairs = [("lives", "liv"), ("oslo", "oslo"), ("minji", "minji")]
    df = {"lives": 350_000, "oslo": 20_000, "minji": 3_000}
    assert split_rare(pairs, df) == ([("minji", "minji")], [("oslo", "oslo"), ("lives", "liv")])
    # The rarest term is asked even alone above the threshold; nothing is set aside when the
    # terms together match few documents, nor when one term is all there is.
    assert split_rare(pairs[:2], df) == ([("oslo", "oslo")], [("lives", "liv")])
    assert split_rare(pairs, {"lives": 50, "oslo": 5, "minji": 1}) == (pairs, [])
    assert split_rare(pairs[:1], df) == (pairs[:1], [])


@pytest.mark.parametrize("tf", [1, 3, 50])
@pytest.mark.parametrize("filler", [0, 1, 20])
def test_no_document_scores_above_a_terms_upper_bound(tf: int, filler: int) -> None:
    doc = " ".join(["jazz"] * tf + ["music"] * filler)
    [score, none] = bm25(["jazz"], [doc, "piano " * 40], {"jazz": 3}, n=100)
    assert 0 == none < score < upper_bound(3, 100)
