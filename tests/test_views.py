"""One JSON shape per thing on every surface (kg.schemas.views): facts, episodes, entities,
search hits and pages, built from what the store returns."""

from __future__ import annotations

import json
import re

from kg import KG
from kg.schemas.graph import EntityNode
from kg.schemas.views import (
    EpisodeView,
    FactView,
    HitView,
    Page,
    entity_view,
    episode_view,
    fact_view,
    hit_views,
)
from tests.conftest import add, t

Z_TIME = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\Z")


async def test_a_fact_closed_by_a_later_episode(mem: KG) -> None:
    first = await add(mem, t(2020), ("Alice", "LIVES_IN", "Paris"))
    second = await add(mem, t(2022), ("Alice", "LIVES_IN", "Berlin"))
    versions = await mem.history(subject="Alice")
    rows = [json.loads(fact_view(f).model_dump_json()) for f in versions]
    assert all(set(r) == set(FactView.model_fields) for r in rows)
    paris = [r for r in rows if r["object"] == "Paris"]
    closed = next(r for r in paris if r["valid_to"] is not None)
    assert closed["valid_to"] == "2022-01-01T00:00:00Z"
    assert closed["valid_from"] == "2020-01-01T00:00:00Z"
    assert closed["status"] == "closed" and closed["trust"] == "user"
    assert closed["episode_id"] == first.episode_uuid
    assert closed["closed_by_episode_id"] == second.episode_uuid
    assert Z_TIME.match(closed["known_from"])
    berlin = next(r for r in rows if r["object"] == "Berlin")
    assert berlin["status"] == "current" and berlin["valid_to"] is None
    assert berlin["known_to"] is None and berlin["text"]
    # every version of one fact carries the fact's id (which `why` takes)
    assert len({r["id"] for r in paris}) == 1


async def test_episode_and_entity_views(mem: KG) -> None:
    result = await add(mem, t(2021, 3, 4), ("Bob", "WORKS_AT", "Acme"), name="note")
    (episode,) = await mem.store.episodes("default", [result.episode_uuid])
    row = json.loads(episode_view(episode).model_dump_json())
    assert set(row) == set(EpisodeView.model_fields)
    assert row == {
        "id": result.episode_uuid,
        "name": "note",
        "source": "facts",
        "channel": "user",
        "reference_time": "2021-03-04T00:00:00Z",
        "created_at": row["created_at"],
        "status": "ingested",
    }
    assert Z_TIME.match(row["created_at"])
    bob = EntityNode(
        uuid="e1",
        group_id="default",
        name="Bob",
        name_key="bob",
        labels=["Person"],
        summary="A builder.",
        created_at=t(2021),
    )
    assert json.loads(entity_view(bob).model_dump_json()) == {
        "id": "e1",
        "name": "Bob",
        "labels": ["Person"],
        "summary": "A builder.",
    }


async def test_hits_carry_their_kind_fields_only(falkor_kg: KG) -> None:
    await add(falkor_kg, t(2021), ("Carol", "LIVES_IN", "Lisbon"))
    await falkor_kg.add_episode(
        source="text", reference_time=t(2021), content="Carol likes tea", extract=False
    )
    results = await falkor_kg.search("Carol", recipe="combined_hybrid_rrf")
    hits = [json.loads(h.model_dump_json()) for h in hit_views(results)]
    kinds = {h["kind"] for h in hits}
    assert {"fact", "episode"} <= kinds
    fact = next(h for h in hits if h["kind"] == "fact")
    assert set(fact) == {"kind", "score"} | set(FactView.model_fields)
    assert fact["status"] == "current" and fact["valid_from"] == "2021-01-01T00:00:00Z"
    episode = next(h for h in hits if h["kind"] == "episode")
    assert set(episode) == {"kind", "score", "text"} | set(EpisodeView.model_fields)
    assert episode["text"] == "Carol likes tea"
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)


def test_schemas_publish_the_fields() -> None:
    """The serialization schema (what FastAPI and MCP output schemas show) is the model's,
    with the times as strings, not an untyped object."""
    schema = HitView.model_json_schema(mode="serialization")
    assert {"kind", "id", "score", "text", "valid_to"} <= set(schema["properties"])
    fact = FactView.model_json_schema(mode="serialization")
    assert fact["properties"]["valid_from"]["type"] == "string"
    page = Page[FactView].model_json_schema(mode="serialization")
    assert set(page["properties"]) == {"items", "next_cursor"}
    assert Page[int](items=[1]).model_dump() == {"items": [1], "next_cursor": None}
