"""kg on a graph written by graphiti-core 0.31.2, on both backends: Graphiti writes with its own
driver (FalkorDriver on kg's embedded FalkorDB client; Neo4jDriver, its own Bolt connection, on
the session's Neo4j server), then kg reads, adopts and rolls back on its store.

Graphiti runs its real add_episode pipeline (extraction, node resolution, edge extraction,
dedupe and invalidation) against a scripted LLM client that answers its prompts the way a
model would for these three short messages. Then kg searches the graph as Graphiti left it,
adopts it, and answers as-of questions, explains facts and rolls an episode back.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("GRAPHITI_TELEMETRY_ENABLED", "false")

from graphiti_core import Graphiti
from graphiti_core.cross_encoder.client import CrossEncoderClient
from graphiti_core.driver.driver import GraphDriver
from graphiti_core.driver.falkordb_driver import FalkorDriver
from graphiti_core.driver.neo4j_driver import Neo4jDriver
from graphiti_core.llm_client.client import LLMClient
from graphiti_core.llm_client.config import LLMConfig
from graphiti_core.nodes import EpisodeType

from kg import KG
from kg.graphiti_embedder import GraphitiEmbedder
from kg.ingest.embeddings import local_minilm
from kg.schemas.embedder import Embedder
from kg.store.falkordb import FalkorDBStore
from tests.conftest import Backend, open_test_kg, t

GROUP = "team7"  # Graphiti's FalkorDB full-text filter fails on group ids with '-'


@dataclass
class Said:
    """What the scripted model 'reads' in the current episode."""

    entities: list[str]
    edges: list[tuple[str, str, str, str, str]]  # source, relation, target, fact, valid_at
    contradicts: str | None = None  # a phrase: existing facts containing it are contradicted


def _tag(prompt: str, name: str) -> str:
    m = re.search(f"<{name}>\\s*(.*?)\\s*</{name}>", prompt, re.S)
    return m.group(1) if m else "[]"


class ScriptedGraphitiLLM(LLMClient):
    """Graphiti's LLMClient interface, answering from `self.said` instead of a model."""

    def __init__(self) -> None:
        super().__init__(LLMConfig(model="scripted"))
        self.said = Said([], [])
        self.calls: list[str] = []

    async def _generate_response(
        self,
        messages: Any,
        response_model: Any = None,
        max_tokens: Any = None,
        model_size: Any = None,
        *,
        model: Any = None,
    ) -> dict[str, Any]:
        name = response_model.__name__ if response_model else ""
        self.calls.append(name)
        prompt = messages[-1].content
        if name == "ExtractedEntities":
            return {
                "extracted_entities": [{"name": n, "entity_type_id": 0} for n in self.said.entities]
            }
        if name == "NodeResolutions":
            existing = json.loads(_tag(prompt, "EXISTING ENTITIES"))
            return {
                "entity_resolutions": [
                    {
                        "id": e["id"],
                        "name": e["name"],
                        "duplicate_candidate_id": next(
                            (c["candidate_id"] for c in existing if c["name"] == e["name"]), -1
                        ),
                    }
                    for e in json.loads(_tag(prompt, "ENTITIES"))
                ]
            }
        if name == "ExtractedEdges":
            return {
                "edges": [
                    {
                        "source_entity_name": s,
                        "relation_type": r,
                        "target_entity_name": o,
                        "fact": fact,
                        "valid_at": valid_at,
                    }
                    for s, r, o, fact, valid_at in self.said.edges
                ]
            }
        if name == "EdgeDuplicate":
            existing = ast.literal_eval(_tag(prompt, "EXISTING FACTS"))
            candidates = ast.literal_eval(_tag(prompt, "FACT INVALIDATION CANDIDATES"))
            new = _tag(prompt, "NEW FACT")
            phrase = self.said.contradicts
            return {
                "duplicate_facts": [f["idx"] for f in existing if f["fact"] == new],
                "contradicted_facts": [
                    f["idx"]
                    for f in existing + candidates
                    if phrase and phrase in f["fact"] and f["fact"] != new
                ],
            }
        raise AssertionError(f"unscripted Graphiti call {name}")


class NoCrossEncoder(CrossEncoderClient):
    async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
        return [(p, 1.0) for p in passages]


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    return local_minilm()


@dataclass
class Written:
    kg: KG
    graphiti: Graphiti
    llm: ScriptedGraphitiLLM
    episodes: dict[str, str]  # name -> uuid
    backend: Backend


def graphiti_driver(backend: Backend, kg: KG) -> GraphDriver:
    """Graphiti's own driver for the backend, on the same data kg opened."""
    if backend.server is None:
        assert isinstance(kg.store, FalkorDBStore)
        return FalkorDriver(falkor_db=kg.store.client, database=GROUP)
    s = backend.server
    return Neo4jDriver(uri=s.uri, user=s.user, password=s.password)


@pytest.fixture
async def written(backend: Backend, home: Path, minilm: Embedder) -> AsyncIterator[Written]:
    async with await open_test_kg(backend, home, embedder=minilm) as kg:
        llm = ScriptedGraphitiLLM()
        driver = graphiti_driver(backend, kg)
        g = Graphiti(
            graph_driver=driver,
            llm_client=llm,
            embedder=GraphitiEmbedder(minilm),
            cross_encoder=NoCrossEncoder(),
        )
        await g.build_indices_and_constraints()
        script = [
            (
                "e1",
                "Minji: I live in Seoul.",
                datetime(2024, 1, 10, tzinfo=UTC),
                Said(
                    ["Minji", "Seoul"],
                    [
                        (
                            "Minji",
                            "LIVES_IN",
                            "Seoul",
                            "Minji lives in Seoul",
                            "2024-01-10T00:00:00Z",
                        )
                    ],
                ),
            ),
            (
                "e2",
                "Minji: I work at Naver.",
                datetime(2024, 2, 1, tzinfo=UTC),
                Said(
                    ["Minji", "Naver"],
                    [
                        (
                            "Minji",
                            "WORKS_AT",
                            "Naver",
                            "Minji works at Naver",
                            "2024-02-01T00:00:00Z",
                        )
                    ],
                ),
            ),
            (
                "e3",
                "Minji: I moved to Busan last month.",
                datetime(2024, 6, 12, tzinfo=UTC),
                Said(
                    ["Minji", "Busan"],
                    [
                        (
                            "Minji",
                            "LIVES_IN",
                            "Busan",
                            "Minji lives in Busan",
                            "2024-05-01T00:00:00Z",
                        )
                    ],
                    contradicts="lives in",
                ),
            ),
        ]
        episodes = {}
        for name, body, when, said in script:
            llm.said = said
            r = await g.add_episode(
                name=name,
                episode_body=body,
                source=EpisodeType.message,
                source_description="chat",
                reference_time=when,
                group_id=GROUP,
            )
            episodes[name] = r.episode.uuid
        try:
            yield Written(kg, g, llm, episodes, backend)
        finally:
            if backend.server is not None:
                await driver.close()


async def test_kg_searches_a_graphiti_graph_as_written(written: Written) -> None:
    kg = written.kg
    # Graphiti's pipeline: 2 calls for the first episode, 4 for each later one here (kg: 1).
    assert len(written.llm.calls) == 10
    assert set(written.llm.calls) == {
        "ExtractedEntities",
        "NodeResolutions",
        "ExtractedEdges",
        "EdgeDuplicate",
    }
    hits = await kg.search(
        "where does Minji live", group_id=GROUP, recipe="facts_cosine", include_closed=True
    )
    # Graphiti closed "lives in Seoul" in place (invalid_at and expired_at on one edge), so
    # before adoption that belief is simply retired: no view of it survives.
    assert {h.fact.object for h in hits.facts} == {"Busan", "Naver"}
    episodes = await kg.search("Naver", group_id=GROUP, recipe="episodes_bm25")
    assert [h.episode.uuid for h in episodes.episodes] == [written.episodes["e2"]]


async def test_adopted_graph_answers_as_of_why_and_rollback(written: Written) -> None:
    kg, eps = written.kg, written.episodes
    report = await kg.adopt_graphiti(GROUP)
    assert (report.entities, report.episodes, report.edges) == (4, 3, 3)
    assert (report.closures, report.closures_unattributed) == (1, 0)

    def objects(facts: list[Any]) -> list[str]:
        return sorted(f.object for f in facts)

    assert objects(await kg.facts(group_id=GROUP, subject="Minji")) == ["Busan", "Naver"]
    march = await kg.facts(group_id=GROUP, subject="Minji", valid_at=t(2024, 3))
    assert objects(march) == ["Naver", "Seoul"]  # what was true in March
    [busan] = [f for f in await kg.facts(group_id=GROUP, subject="Minji") if f.object == "Busan"]
    # Transaction time: before e3 was ingested, kg's view says Seoul is still current.
    e3 = (await kg.store.episodes(GROUP, [eps["e3"]]))[0]
    just_before = e3.created_at - timedelta(microseconds=1)
    before = await kg.facts(group_id=GROUP, subject="Minji", known_at=just_before)
    assert objects(before) == ["Naver", "Seoul"]
    # Why: the Seoul fact's versions name e3 as the episode that closed it.
    [seoul] = [
        v
        for v in await kg.history(group_id=GROUP, subject="Minji")
        if v.object == "Seoul" and v.edge.expired_at is None
    ]
    assert seoul.edge.invalid_at == t(2024, 5, 1) and seoul.edge.invalidated_by == eps["e3"]
    # The episode's own facts replay before what it ended: Busan supersedes Seoul.
    assert (seoul.edge.invalidation_reason or "").startswith("superseded")
    why = await kg.why(seoul.edge.uuid, group_id=GROUP)
    assert {e.uuid for e in why.episodes} == {eps["e1"], eps["e3"]}
    assert (await kg.why(busan.edge.uuid, group_id=GROUP)).episodes[0].uuid == eps["e3"]
    # Rollback of the Graphiti episode that moved her: Seoul is current again.
    rolled = await kg.rollback(eps["e3"], group_id=GROUP, dry_run=False)
    assert rolled.applied
    assert objects(await kg.facts(group_id=GROUP, subject="Minji")) == ["Naver", "Seoul"]
    assert (await kg.replay(group_id=GROUP)).identical
    assert (await kg.adopt_graphiti(GROUP)).already_adopted


async def test_graphiti_keeps_reading_an_adopted_graph(written: Written) -> None:
    await written.kg.adopt_graphiti(GROUP)
    edges = await written.graphiti.search("Minji lives", group_ids=[GROUP])
    assert any("Busan" in e.fact for e in edges)


async def test_erasure_reaches_graphiti_summaries(written: Written) -> None:
    kg = written.kg
    await kg.adopt_graphiti(GROUP)
    minji = (await kg.store.entities_by_key(GROUP, ["minji"]))[0]
    assert "Seoul" in minji.summary  # Graphiti wrote "Minji lives in Seoul" on Minji
    receipt = await kg.erase_entity("Seoul", group_id=GROUP)
    # e1 named Seoul; e3 did not, but its record says her Seoul fact ended: both go whole.
    assert receipt.episodes_deleted == 2
    minji = (await kg.store.entities_by_key(GROUP, ["minji"]))[0]
    assert "seoul" not in minji.summary.casefold()
    rows = await kg.store.raw_query(GROUP, "MATCH (n) RETURN properties(n) AS p")
    dump = json.dumps([r["p"] for r in rows], default=str).casefold()
    i = dump.find("seoul")
    assert i < 0, dump[max(0, i - 300) : i + 100]


async def test_cli_adopts_a_graphiti_group(written: Written, home: Path) -> None:
    from typer.testing import CliRunner

    from kg.cli import app

    await written.kg.close()  # the embedded store allows one process at a time
    runner = CliRunner()
    where = written.backend.cli_args(home)

    async def kg(*args: str) -> Any:  # the CLI runs its own event loop: give it a thread
        return await asyncio.to_thread(runner.invoke, app, [*where, *args])

    r = await kg("--group", GROUP, "adopt-graphiti")
    assert r.exit_code == 0 and "adopted group team7: 4 entities, 3 episodes" in r.stdout
    assert "already adopted" in (await kg("--group", GROUP, "adopt-graphiti")).stdout
    r = await kg("--group", GROUP, "as-of", "2024-03-01", "--subject", "Minji", "--json")
    assert sorted(f["object"] for f in json.loads(r.stdout)) == ["Naver", "Seoul"]
    r = await kg("--group", "nobody", "adopt-graphiti")
    assert r.exit_code == 1 and "no group 'nobody'" in r.stderr


async def test_the_graphiti_embedder_embeds_text_only() -> None:
    class Lengths:
        model, dim = "lengths", 1

        async def embed(self, texts: Any) -> list[list[float]]:
            return [[float(len(x))] for x in texts]

    g = GraphitiEmbedder(Lengths())
    assert await g.create("abc") == [3.0] and await g.create(["ab", "xyz"]) == [2.0]
    assert await g.create_batch(["a", "bb"]) == [[1.0], [2.0]]
    with pytest.raises(TypeError, match="embeds text, got int"):
        await g.create([101, 2023])  # token ids
