"""OpenTelemetry spans of ingest and search (kg.tracing), collected with the SDK's in-memory
exporter: one span per episode, per bulk run and per search, with the group, kinds and
counts as attributes, never an episode's text, a query or a subject name; an error is
recorded on its span."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from kg import KG, tracing
from kg.errors import InputError

NAME, SECRET_TEXT = "Yolanda Brightwater", "the vault code is 7741"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.set_provider(provider)
    try:
        yield exporter
    finally:
        tracing.set_provider(None)


async def test_ingest_and_search_are_traced_without_what_was_said(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    when = datetime(2024, 6, 1, tzinfo=UTC)
    async with await KG.open(home=tmp_path / "home") as kg:
        fact = {"subject": NAME, "predicate": "LIVES_IN", "object": "Lima"}
        await kg.add_episode(source="facts", reference_time=when, facts=[fact], group_id="g1")
        await kg.add_episodes(
            [{"source": "text", "content": SECRET_TEXT, "group_id": "g1", "reference_time": when}],
            extract=False,
        )
        await kg.search(f"where does {NAME} live", group_id="g1")
        with pytest.raises(InputError):
            await kg.search("x", group_id="g1", center="Nobody Known")  # no such entity
    done = spans.get_finished_spans()
    by_name = {s.name: s for s in done}
    assert {"kg.ingest", "kg.ingest.bulk", "kg.search"} <= set(by_name)
    ingest = next(
        s
        for s in done
        if s.name == "kg.ingest" and s.attributes and s.attributes["kg.episode.source"] == "facts"
    )
    assert dict(ingest.attributes or {}) == {
        "kg.group_id": "g1",
        "kg.episode.source": "facts",
        "kg.episode.channel": "user",
        "kg.extract": True,
        "kg.episode.status": "added",
        "kg.facts.added": 1,
        "kg.facts.closed": 0,
        "kg.llm_calls": 0,
        "kg.attempts": 1,
    }
    bulk = by_name["kg.ingest.bulk"].attributes or {}
    assert (bulk["kg.episodes"], bulk["kg.added"], bulk["kg.failed"]) == (1, 1, 0)
    search = [s for s in done if s.name == "kg.search"]
    ok, failed = search[0], search[-1]
    assert (ok.attributes or {})["kg.hits.facts"] == 1
    assert isinstance((ok.attributes or {})["kg.search.recipe"], str)  # the recipe's name
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "InputError"
    for s in done:  # the message ("no entity named 'Nobody Known'") is not on the span
        text = repr((dict(s.attributes or {}), s.events, s.status.description))
        for word in ("Yolanda", "Brightwater", "vault", "Nobody"):
            assert word not in text, (s.name, text)
