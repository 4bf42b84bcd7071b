"""Observability: per-episode metrics stored with the episode, query metrics persisted per
group on close, both summed by `KG.metrics` and shown by `kg stats`."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kg import KG
from kg.cli import app
from kg.ingest.llm import ScriptedLLM
from tests.conftest import Backend, add, open_test_kg, t
from tests.test_llm_ingest import f, reply


async def test_episode_metrics_are_stored_and_summed(backend: Backend, home: Path) -> None:
    llm = ScriptedLLM([])
    async with await open_test_kg(backend, home, llm=llm) as kg:
        llm._replies.append(reply(f("Minji", "LIVES_IN", "Seoul", "I live in Seoul")))
        await kg.add_episode(
            source="message", content="Minji: I live in Seoul.", reference_time=t(2024, 1, 1)
        )
        llm._replies += ["oops", reply(f("Minji", "LIVES_IN", "Busan", "I moved to Busan"))]
        await kg.add_episode(
            source="message", content="Minji: I moved to Busan.", reference_time=t(2024, 6, 1)
        )
        llm._replies.append(reply(f("Minji", "LIKES", "Paris", "not in the text")))
        await kg.add_episode(
            source="message", content="Minji: hello!", reference_time=t(2024, 7, 1)
        )
        await add(kg, t(2024, 8, 1), ("Minji", "KNOWS", "Jisoo"))
        [moved] = [
            e for e in await kg.store.find_episodes("default", None, None) if "Busan" in e.content
        ]
        m = (await kg.metrics()).ingest
    assert (m.episodes, m.llm_episodes, m.empty_extractions) == (4, 3, 1)
    assert m.llm_calls == 4  # one corrective retry
    assert m.llm_tokens > 0 and m.facts_dropped == 1
    assert (m.facts_added, m.facts_closed, m.entities_added) == (3, 1, 4)
    assert m.empty_extraction_rate == 1 / 3 and m.llm_calls_per_episode == 4 / 3
    assert moved.llm_calls == 2 and moved.facts_closed == 1


def test_an_episode_stores_every_counter_its_summary_reports() -> None:
    from kg.schemas.metrics import Counters, GraphCounters
    from kg.schemas.plan import PlanSummary

    shared = {name: i + 1 for i, name in enumerate(GraphCounters.model_fields)}
    summary = PlanSummary(
        **shared,
        prompt_tokens=100,
        completion_tokens=20,
        facts_dropped={"unknown_predicate": 2, "not_in_text": 1},
    )
    assert summary.counters() == Counters(**shared, llm_tokens=120, facts_dropped=3)


async def test_query_metrics_persist_across_processes(backend: Backend, home: Path) -> None:
    async with await open_test_kg(backend, home) as kg:
        await add(kg, t(2024, 1, 1), ("Minji", "LIVES_IN", "Busan"))
        await kg.search("Minji Busan")
        await kg.search("nothing matches this")
        block = await kg.context("where does Minji live", max_tokens=200)
        live = (await kg.metrics()).queries  # unflushed counters count too
        assert (live.queries, live.zero_result_queries, live.contexts) == (3, 1, 1)
    async with await open_test_kg(backend, home) as kg:
        await kg.search("Busan")
        q = (await kg.metrics()).queries
    assert (q.queries, q.zero_result_queries, q.contexts) == (4, 1, 1)
    assert q.context_tokens >= len(block) // 4 and q.branch_hits["facts_bm25"] >= 3
    assert q.mean_latency_ms is not None and q.mean_latency_ms > 0


async def test_searching_an_unknown_group_stores_nothing(backend: Backend, home: Path) -> None:
    async with await open_test_kg(backend, home) as kg:
        await kg.search("anything", group_id="ghost")
    async with await open_test_kg(backend, home) as kg:
        assert "ghost" not in await kg.groups()
        assert (await kg.metrics("ghost")).queries.queries == 0


def test_kg_stats_shows_ingest_and_query_metrics(
    backend: Backend, home: Path, tmp_path: Path
) -> None:
    runner = CliRunner()
    path = tmp_path / "e.jsonl"
    path.write_text(
        json.dumps(
            {
                "source": "facts",
                "reference_time": "2024-01-01T00:00:00Z",
                "facts": [{"subject": "A", "predicate": "KNOWS", "object": "B"}],
            }
        )
    )
    base = backend.cli_args(home)
    assert runner.invoke(app, [*base, "ingest", str(path)]).exit_code == 0
    assert runner.invoke(app, [*base, "search", "A knows B"]).exit_code == 0
    r = runner.invoke(app, [*base, "stats", "--json"])
    body = json.loads(r.stdout)
    assert body["current_facts"] == 1 and body["ingest"]["facts_added"] == 1
    assert body["queries"]["queries"] == 1 and body["queries"]["branch_hits"]["facts_bm25"] == 1
    table = runner.invoke(app, [*base, "stats"]).stdout
    assert "ingest: facts added" in table and "queries: hits facts bm25" in table


@pytest.mark.falkordb_only("kills the embedded server; the session's Neo4j serves every test")
async def test_close_survives_a_store_that_is_gone(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kg = await KG.open(home=home)
    await add(kg, t(2024, 1, 1), ("A", "KNOWS", "B"))
    await kg.search("A")
    server = kg.store.server  # type: ignore[attr-defined]
    assert server is not None and server.process is not None
    server.process.kill()
    server.process.wait()
    with caplog.at_level(logging.WARNING, logger="kg"):
        await kg.close()  # does not raise: the metrics are lost, and said so
    assert "query metrics not saved" in caplog.text
