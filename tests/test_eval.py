"""`kg eval`: the golden-set format, the metrics, kg beside an ADD-only store, the LLM path."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kg import InputError
from kg.cli import render
from kg.cli.app import app
from kg.eval import GoldenSet, ItemType, Mode, System, load, run_eval, wilson
from kg.eval.golden import parse_lines
from kg.eval.judge import ANSWER_SYSTEM, DONT_KNOW
from kg.eval.metrics import Rate, appears, gold_in, lines, stale_in
from kg.eval.runner import EvalReport, Row, add_only
from kg.ingest.llm import Message, OpenAILLM, ScriptedLLM
from kg.retrieval.context import HEADER

try:  # the openai client's own HTTP library: httpx2 in openai >= 3, httpx before
    import httpx2
except ImportError:  # pragma: no cover
    import httpx as httpx2  # type: ignore[no-redef]

EXAMPLE = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "eval_example.jsonl"


def small(n_items: int | None = None) -> GoldenSet:
    """The committed example, first conversation only (and its first n items)."""
    full = load(EXAMPLE)
    items = [i for i in full.items if i.haystack == "chat-1"][:n_items]
    return GoldenSet(meta=full.meta, haystacks={"chat-1": full.haystacks["chat-1"]}, items=items)


def row(report: EvalReport, system: System, kind: str) -> Row:
    return next(r for r in report.rows if r.system is system and r.type == kind)


# -- format ---------------------------------------------------------------------------------


def test_the_committed_example_loads_and_round_trips() -> None:
    golden = load(EXAMPLE)
    kinds = {i.type for i in golden.items}
    assert {
        ItemType.knowledge_update,
        ItemType.temporal,
        ItemType.tool_result,
        ItemType.single,
        ItemType.abstain,
    } <= kinds
    assert "YAGO" in golden.meta.license and golden.meta.ontology is not None
    again = parse_lines(golden.dumps().splitlines())
    assert again == golden


ITEM = {
    "kind": "item",
    "id": "q1",
    "type": "knowledge_update",
    "question": "Where?",
    "asked_at": "2024-01-01T00:00:00Z",
    "haystack": "h",
    "evidence": ["t2"],
    "answers": ["Busan"],
    "stale_answers": ["Seoul"],
}
HAY = {
    "kind": "haystack",
    "id": "h",
    "sessions": [
        {
            "id": "s",
            "turns": [
                {"id": "t1", "at": "2023-01-01T00:00:00Z", "text": "I live in Seoul"},
                {"id": "t2", "at": "2023-06-01T00:00:00Z", "text": "I moved to Busan"},
            ],
        }
    ],
}


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([HAY, {**ITEM, "haystack": "nope"}], "item 'q1': no haystack 'nope'"),
        ([HAY, {**ITEM, "evidence": ["t9"]}], "item 'q1': no turn 't9' in its haystack"),
        ([HAY, {**ITEM, "stale_answers": []}], "a knowledge_update item needs stale_answers"),
        ([HAY, {**ITEM, "type": "abstain"}], "an abstain item has no evidence and no answers"),
        ([HAY, {**ITEM, "type": "quiz"}], "golden set:2: item.type: Input should be"),
        ([HAY, HAY], "golden set:2: haystack 'h' defined twice"),
        ([HAY, ITEM, ITEM], "item ids repeat"),
    ],
)
def test_bad_records_get_one_line_errors(records: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)) as info:
        parse_lines([json.dumps(r) for r in records])
    assert "\n" not in str(info.value)


def test_not_json_names_the_line() -> None:
    with pytest.raises(InputError, match=r"golden set:2: not JSON"):
        parse_lines([json.dumps(HAY), "{oops"])


# -- metrics --------------------------------------------------------------------------------


def test_wilson_intervals() -> None:
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert Rate(k=0, n=0).show() == "—"
    assert Rate(k=1, n=4).show(counts=True) == "25.0 [4.6-69.9] 1/4"


BLOCK = "\n".join(
    [
        HEADER,
        "<facts>",
        '- "Alice lives in Busan" [valid 2023-06-01 → now; source: user, trust user]',
        '- "Alice lives in Seoul" [valid 2020-01-01 → 2023-06-01 (no longer true); source: user]',
        '- "Bob plays for Chelsea Women" [valid 2021-01-01 → now; source: user, trust user]',
        "</facts>",
        "<episodes>",
        '- [2020-01-01T09:00Z; user] "Alice: I live in Seoul_Gangnam now"',
        "</episodes>",
    ]
)


def test_reading_a_context_block() -> None:
    got = [(x.section, x.current) for x in lines(BLOCK)]
    assert got == [("facts", True), ("facts", False), ("facts", True), ("episodes", False)]
    # Seoul is closed in the facts and quoted in an episode: history, not current.
    assert stale_in(BLOCK, ["Seoul"], ["Busan"]) == (False, True)
    assert stale_in(BLOCK, ["Busan"], ["Seoul"]) == (True, True)
    # A stale value inside a gold answer is the gold answer, not the stale one.
    assert stale_in(BLOCK, ["Chelsea"], ["Chelsea Women"]) == (False, False)
    assert stale_in(BLOCK, ["Chelsea"], ["Arsenal"]) == (True, True)
    # Another subject's current value is not stale for this one.
    assert stale_in(BLOCK, ["Busan"], ["Seoul"], subject="Bob") == (False, False)
    assert stale_in(BLOCK, ["Busan"], ["Seoul"], subject="Alice") == (True, True)
    assert appears("seoul gangnam", BLOCK) and not appears("Seo", BLOCK)
    assert gold_in(BLOCK, ["Busan"]) and gold_in(BLOCK, ["Seoul"]) and not gold_in(BLOCK, ["Daegu"])


def test_add_only_keeps_every_predicate_multi_valued() -> None:
    onto = load(EXAMPLE).meta.ontology
    assert onto is not None and any(p.single_valued for p in onto.predicates)
    baseline = add_only(onto)
    assert [p.name for p in baseline.predicates] == [p.name for p in onto.predicates]
    assert not any(p.single_valued for p in baseline.predicates)


# -- runs on the real store -----------------------------------------------------------------


async def test_kg_never_renders_a_superseded_value_as_current(tmp_path: Path) -> None:
    report = await run_eval(small(), home=tmp_path / "kg", k=10)
    assert [s.value for s in dict.fromkeys(r.system for r in report.rows)] == ["kg", "add_only"]
    for kind in ("knowledge_update", "temporal", "tool_result"):
        ours, theirs = row(report, System.kg, kind), row(report, System.add_only, kind)
        assert ours.stale.n == theirs.stale.n > 0
        assert ours.stale.k == 0, kind
        assert theirs.stale.k == theirs.stale.n, kind  # every old value kept, shown as current
        assert ours.gold.k == ours.gold.n, kind
    ku = row(report, System.kg, "knowledge_update")
    assert ku.recall.n == ku.items and ku.recall.k == ku.recall.n
    assert ku.p95_ms >= ku.p50_ms > 0 and ku.tokens_mean > 0
    everything = row(report, System.kg, "all")
    assert everything.items == len(small().items)
    # In raw mode there are no facts, so add_only would be kg itself: skipped, and said so.
    raw = await run_eval(small(3), home=tmp_path / "raw", mode=Mode.raw)
    assert {r.system for r in raw.rows} == {System.kg}
    assert any("add_only skipped" in n for n in raw.notes)


def fake_model(messages: list[Message]) -> str:
    """Answers with the first record in the context (or says it does not know); grades by
    looking for the gold and outdated answers in the answer."""
    system, user = messages[0]["content"], messages[-1]["content"]
    if system == ANSWER_SYSTEM:
        records = [x for x in user.splitlines() if x.startswith(("- ", "["))]
        return json.dumps({"answer": records[0] if records else DONT_KNOW})
    gold = re.search(r"Gold answers: (.*)", user)
    stale = re.search(r"Outdated answers: (.*)", user)
    answer = re.search(r"Answer to grade: (.*)", user, re.S)
    assert gold and stale and answer
    said = answer[1]
    if DONT_KNOW in said:
        verdict = "abstained"
    elif any(appears(g, said) for g in gold[1].split("; ")):
        verdict = "correct"
    elif any(appears(s, said) for s in stale[1].split("; ")):
        verdict = "stale"
    else:
        verdict = "wrong"
    return json.dumps({"verdict": verdict})


async def test_with_an_llm_it_answers_judges_and_runs_full_context(tmp_path: Path) -> None:
    golden = small(4)
    llm = ScriptedLLM([fake_model] * 100)
    report = await run_eval(golden, home=tmp_path / "kg", llm=llm)
    systems = [s.value for s in dict.fromkeys(r.system for r in report.rows)]
    assert systems == ["kg", "add_only", "full_context"]
    assert len(llm.requests) == 2 * 3 * len(golden.items)  # answer + judge, per system
    assert all(r.verdict in {"correct", "stale", "wrong", "abstained"} for r in report.items)
    ours = row(report, System.kg, "all")
    assert ours.answer is not None and ours.answer.n == len(golden.items)
    assert ours.answer_stale is not None and ours.answer_stale.k == 0
    full = row(report, System.full_context, "all")
    assert full.tokens_mean > ours.tokens_mean  # the whole haystack against a k-bounded block
    # The full-context prompt holds the haystack up to asked_at; kg's, the context block.
    prompts = [r[-1]["content"] for r in llm.requests if r[0]["content"] == ANSWER_SYSTEM]
    assert any(HEADER in p for p in prompts) and any(
        "Mina:" in p and HEADER not in p for p in prompts
    )
    # Shown in 80 columns: the answers in a table of their own, per system.
    console = Console(width=80, record=True, file=io.StringIO())
    render.eval_report(console, report)
    shown = console.export_text()
    assert max(map(len, shown.splitlines())) <= 80 and "…" not in shown, shown
    answers = shown.split("correct")[1]  # the answers table
    assert "full_context" in answers and f"{100 * ours.answer.k / ours.answer.n:.1f}" in answers


async def test_the_llm_path_through_the_real_openai_client(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    async def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        seen.append(body)
        reply = fake_model(body["messages"])
        return httpx2.Response(
            200,
            json={
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": reply},
                    }
                ],
                "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55},
            },
        )

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    llm = OpenAILLM("judge-model", base_url="http://127.0.0.1:9/v1", http_client=http)
    report = await run_eval(small(2), home=tmp_path / "kg", llm=llm, systems=[System.kg])
    assert report.llm == "judge-model"
    assert len(seen) == 4 and all(b["model"] == "judge-model" for b in seen)
    assert seen[0]["response_format"]["json_schema"]["name"] == "Answer"
    assert seen[1]["response_format"]["json_schema"]["name"] == "Judgement"
    assert [r.verdict for r in report.items] == ["correct", "correct"]


def test_cli_eval_prints_the_table_and_writes_items(tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    path.write_text(small(3).dumps())
    items = tmp_path / "items.jsonl"
    runner = CliRunner()
    result = runner.invoke(
        app, ["eval", str(path), "--embedder", "none", "--json", "--items-out", str(items)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert {r["system"] for r in report["rows"]} == {"kg", "add_only"}
    assert len(items.read_text().splitlines()) == 2 * 3
    result = runner.invoke(app, ["eval", str(path), "--embedder", "none", "--system", "kg"])
    assert result.exit_code == 0 and "Wilson 95%" in result.stdout
    # Fits 80 columns by default, nothing cut (rich would shorten cells to 'abs…'); --wide
    # is the one-line table with every column, --json (above) every figure.
    narrow = runner.invoke(app, ["eval", str(path), "--embedder", "none"], env={"COLUMNS": "80"})
    assert narrow.exit_code == 0, narrow.output
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80, narrow.stdout
    assert "…" not in narrow.stdout, narrow.stdout
    for word in ("kg", "add_only", "knowledge_update", "stale", "tokens", "100.0"):
        assert word in narrow.stdout, (word, narrow.stdout)
    wide = runner.invoke(
        app, ["eval", str(path), "--embedder", "none", "--wide"], env={"COLUMNS": "200"}
    )
    assert wide.exit_code == 0 and "p95 ms" in wide.stdout and "abstained: others" in wide.stdout
    assert "100.0 [" in wide.stdout  # the interval beside the figure
    bad = runner.invoke(app, ["eval", str(tmp_path / "missing.jsonl")])
    assert bad.exit_code == 1 and "no such file" in bad.output
    bad = runner.invoke(app, ["eval", str(path), "--mode", "llm", "--embedder", "none"])
    assert bad.exit_code == 1 and "needs an LLM" in bad.output
    bad = runner.invoke(app, ["eval", str(path), "--embedder", "none", "--abstain-below", "0.5"])
    assert bad.exit_code == 1 and "abstain_below needs an embedder" in bad.output, bad.output
    bad = runner.invoke(
        app, ["eval", str(path), "--embedder", "none", "--abstain-joint-below", "0.27"]
    )
    assert bad.exit_code == 1 and "abstain_joint_below needs an embedder" in bad.output, bad.output


def test_the_documented_example_records_parse() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "eval.md").read_text()
    block = re.search(r"```json\n(.*?)```", doc, re.S)
    assert block is not None
    text, records, decoder = block[1], [], json.JSONDecoder()
    pos = 0
    while text[pos:].strip():
        pos = len(text) - len(text[pos:].lstrip())
        value, pos = decoder.raw_decode(text, pos)
        records.append(json.dumps(value))
    golden = parse_lines(records)
    assert [i.type for i in golden.items] == [ItemType.knowledge_update, ItemType.abstain]
    assert golden.haystacks["chat-1"].turns()[3].channel.value == "tool"
