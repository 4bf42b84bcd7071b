"""Turns next to a hit in their session: the answer often sits beside the turn that matches."""

from __future__ import annotations

from datetime import UTC, datetime

from kg import KG
from kg.retrieval import SearchConfig
from kg.retrieval.config import Fusion, Method, ScopeConfig

SAID = datetime(2024, 5, 1, tzinfo=UTC)
# As episodes_hybrid fuses (score fusion), BM25 alone: the test store has no embedder.
FUSED = SearchConfig(facts=None, episodes=ScopeConfig(methods=(Method.bm25,)), fusion=Fusion.score)


async def turns(kg: KG, session: str, *texts: str) -> None:
    for text in texts:
        await kg.add_episode(
            source="message", content=text, reference_time=SAID, session_id=session, extract=False
        )


async def test_the_turns_beside_the_best_hit_join_its_session_only(kg: KG) -> None:
    # "Luna" shares no word with the question, nor does its key (it opens the session): only
    # its place beside the turn that matches can bring it.
    await turns(kg, "s1", "Bob: Luna chewed my shoes again.", "Bob: My puppy is a handful.")
    await turns(kg, "s2", "Bob: Rex the cat sleeps all day.")
    q = "What is the puppy called?"
    off = await kg.search(q, config=FUSED.model_copy(update={"neighbour_boost": 0.0}))
    assert "Bob: Luna chewed my shoes again." not in {h.episode.content for h in off.episodes}
    on = await kg.search(q, config=FUSED.model_copy(update={"neighbour_boost": 0.5}))
    score = {h.episode.content: h.score for h in on.episodes}
    assert on.episodes[0].episode.content == "Bob: My puppy is a handful."
    # Lifted by half the hit's score; the other session's turn, said in between, is not.
    assert score["Bob: Luna chewed my shoes again."] == on.episodes[0].score / 2
    assert "Bob: Rex the cat sleeps all day." not in score


async def test_a_neighbour_outside_the_view_is_not_lifted(kg: KG) -> None:
    await turns(kg, "s1", "Bob: Luna chewed my shoes again.", "Bob: My puppy is a handful.")
    later = datetime(2024, 6, 1, tzinfo=UTC)
    await kg.add_episode(
        source="message",
        content="Ann: Did the puppy calm down?",
        reference_time=later,
        session_id="s1",
        extract=False,
    )
    config = FUSED.model_copy(update={"neighbour_boost": 0.5})
    hits = await kg.search("puppy handful", config=config, valid_at=SAID)
    found = [h.episode.content for h in hits.episodes]
    assert found == ["Bob: My puppy is a handful.", "Bob: Luna chewed my shoes again."]
