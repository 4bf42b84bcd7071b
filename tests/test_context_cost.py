"""A context's cost is bounded: the request caps hits and tokens, and rendering the block is
linear in its size (it re-read the whole block for every candidate line), with the same
block as before for every budget."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kg import KG
from kg.retrieval import render_context
from kg.retrieval.context import approx_tokens
from kg.server.models import MAX_CONTEXT_HITS, MAX_CONTEXT_TOKENS, ContextRequest
from tests.conftest import add, t


def test_a_context_request_caps_its_own_cost() -> None:
    ContextRequest(query="q", limit=MAX_CONTEXT_HITS, max_tokens=MAX_CONTEXT_TOKENS)
    for over in ({"limit": 1000}, {"max_tokens": 100_000}):
        with pytest.raises(ValidationError, match="less than or equal"):
            ContextRequest.model_validate({"query": "q", **over})


async def test_the_block_is_the_same_as_measured_whole(kg: KG) -> None:
    for i in range(30):
        await add(kg, t(2020 + i % 5), (f"Person {i}", "LIVES_IN", f"City {i % 7}"))
    texts = (
        "서울에 사는 민지는 고양이를 키운다. " * 3,
        "Plain notes about City 3. " * 5,
        "Mixed 東京 and City 2 " * 4,
    )
    for text in texts:
        await kg.add_episode(source="text", content=text, reference_time=t(2024), extract=False)
    results = await kg.search("Person City 서울 東京", recipe="combined_hybrid_rrf", limit=50)
    assert len(results.facts) > 10 and results.episodes

    def whole(text: str) -> int:  # any other counter: the block measured whole, every line
        return approx_tokens(text)

    for budget in (50, 60, 97, 150, 333, 1000, 5000):
        fast = render_context(results, max_tokens=budget)
        assert fast == render_context(results, max_tokens=budget, count=whole), budget
        assert approx_tokens(fast) <= budget
