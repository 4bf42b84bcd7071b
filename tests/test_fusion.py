"""Score fusion and the full-text query: pure functions, checked against hand-computed values."""

from __future__ import annotations

import pytest

from kg.retrieval.fusion import rrf, score_fusion
from kg.retrieval.query import keyword_query


def test_score_fusion_is_a_weighted_sum_of_min_max_scores() -> None:
    bm25 = [("a", 9.0), ("b", 5.0), ("c", 1.0)]
    cosine = [("b", 0.8), ("d", 0.6)]
    fused = dict(score_fusion([bm25, cosine], weights=[3.0, 1.0]))
    # bm25 normalised: a 1, b 0.5, c 0; cosine: b 1, d 0; weights scaled to 0.75 / 0.25.
    assert fused == pytest.approx({"a": 0.75, "b": 0.75 * 0.5 + 0.25, "c": 0.0, "d": 0.0})
    assert max(score_fusion([bm25, cosine]), key=lambda us: us[1])[0] == "b"


def test_a_wide_margin_outvotes_a_hair() -> None:
    # BM25 puts x far above y; cosine puts y a hair above x. RRF sees a tie; scores do not.
    bm25 = [("x", 10.0), ("y", 1.0), ("z", 0.9)]
    cosine = [("y", 0.50), ("x", 0.49), ("z", 0.48)]
    assert dict(rrf([["x", "y", "z"], ["y", "x", "z"]]))["x"] == pytest.approx(
        dict(rrf([["x", "y", "z"], ["y", "x", "z"]]))["y"]
    )
    assert [u for u, _ in score_fusion([bm25, cosine])][:2] == ["x", "y"]


def test_score_fusion_window_equal_scores_and_bad_weights() -> None:
    hits = [("a", 3.0), ("b", 2.0), ("c", 1.0)]
    assert dict(score_fusion([hits], window=2)) == {"a": 1.0, "b": 0.0}  # c is outside
    assert dict(score_fusion([[("a", 0.4), ("b", 0.4)]])) == {"a": 1.0, "b": 1.0}
    assert [u for u, _ in score_fusion([[("a", 0.4), ("b", 0.4)]])] == ["a", "b"]
    assert dict(score_fusion([[], hits]))["a"] == 0.5  # an empty branch still holds its share
    with pytest.raises(ValueError, match="1 weights for 2 branches"):
        score_fusion([hits, hits], weights=[1.0])


@pytest.mark.parametrize(
    ("query", "kept"),
    [
        ("When did Caroline go to the support group?", "Caroline go to the support group?"),
        ("WHAT does Jon do", "Jon"),
        ("Whatever happened to Jon?", "Whatever happened to Jon?"),
        ("What is it?", "it?"),
        ("What did?", "What did?"),  # nothing else: the query as it is
        ("부산에 언제 갔어?", "부산에 언제 갔어?"),
    ],
)
def test_keyword_query_drops_question_words_only(query: str, kept: str) -> None:
    assert keyword_query(query) == kept
