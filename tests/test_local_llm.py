"""Against a real model: SmolLM2-135M-Instruct behind llama-cpp-python's OpenAI server.

Needs the `llm-local` extra (see tests/local_llm.py), which `dev` leaves out because
llama-cpp-python builds from source; without it these tests skip and say why. A 135M model
is weak on purpose: whatever it answers, an episode ends ingested or failed-and-recorded.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

try:  # the openai client's own HTTP library: httpx2 in openai >= 3, httpx before
    import httpx2
except ImportError:  # pragma: no cover
    import httpx as httpx2  # type: ignore[no-redef]
from pydantic import BaseModel

from kg import KG
from kg.errors import ExtractionError
from kg.ingest import content_hash
from kg.ingest.llm import OpenAILLM
from kg.schemas.episode import Episode
from kg.schemas.graph import EpisodeStatus
from tests.local_llm import MODEL, LocalLLMServer, locate

pytestmark = pytest.mark.local_llm


@pytest.fixture(scope="module")
def server() -> Iterator[LocalLLMServer]:
    gguf, why = locate()
    if gguf is None:
        pytest.skip(why)
    with LocalLLMServer() as running:
        yield running


class Wire:
    """Real transport; records what went out and what came back."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.answers: list[tuple[int, str]] = []

    async def request(self, request: httpx2.Request) -> None:
        self.sent.append(json.loads(request.content))

    async def response(self, response: httpx2.Response) -> None:
        await response.aread()
        self.answers.append((response.status_code, response.text))

    def client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            event_hooks={"request": [self.request], "response": [self.response]}
        )


class City(BaseModel):
    name: str
    country: str


async def test_the_real_server_refuses_json_schema_and_takes_json_object_with_schema(
    server: LocalLLMServer,
) -> None:
    wire = Wire()
    llm = OpenAILLM(MODEL, base_url=server.base_url, http_client=wire.client(), timeout=300)
    messages = [{"role": "user", "content": "Paris is the capital of France. Reply in JSON."}]
    value, calls = await llm.structured(messages, City, purpose="probe")
    assert [s.get("response_format", {}).get("type") for s in wire.sent[:2]] == [
        "json_schema",
        "json_object",
    ]
    status, text = wire.answers[0]
    assert status == 500 and "Input should be 'text' or 'json_object'" in text
    assert wire.answers[1][0] == 200
    assert llm.json_mode == "json_object_schema"
    assert isinstance(value, City) and calls[0].prompt_tokens > 0  # grammar-constrained


async def test_a_real_extraction_ends_ingested_or_failed_and_recorded(
    server: LocalLLMServer, tmp_path: Path
) -> None:
    llm = OpenAILLM(MODEL, base_url=server.base_url, max_retries=1, timeout=300, max_tokens=384)
    episode = Episode(
        source="message",
        reference_time=datetime(2023, 5, 8, 13, 56, tzinfo=UTC),
        content="Caroline: I moved to Boston last March, and I work at a bakery now.\n"
        "Melanie: That's great, Caroline!",
    )
    async with await KG.open(home=tmp_path / "kg", llm=llm) as kg:
        try:
            result = await kg.add_episode(episode)
            summary = result.summary
        except ExtractionError:
            summary = None
        node = await kg.store.episode_by_hash("default", content_hash(episode))
        assert node is not None  # recorded either way
        versions = await kg.history(limit=1000)
        assert node.llm_calls >= 1 and llm.json_mode == "json_object_schema"
        if summary is None:  # failed and recorded: retryable, and nothing else written
            assert node.status is EpisodeStatus.failed and node.error
            assert versions == [] and (await kg.stats()).entities == 0
        else:  # ingested: what the summary says, every version traced to the episode
            assert node.status is EpisodeStatus.ingested and node.error is None
            record = json.loads(node.extraction or "null")
            assert isinstance(record, list) and len(record) >= summary.facts_added
            assert len(versions) == summary.facts_added
            assert all(v.edge.episodes == [node.uuid] for v in versions)
            assert {v.edge.fact for v in versions} <= {r["fact"] for r in record}
            assert summary.llm_calls == node.llm_calls <= 3


@pytest.fixture(scope="module")
def gemma() -> Iterator[LocalLLMServer]:
    gguf, why = locate(model="gemma3")
    if gguf is None:
        pytest.skip(why)
    with LocalLLMServer(model="gemma3") as running:
        yield running


SMALL_TURN = (
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.\n"
    "Melanie: Wow, that's cool, Caroline! I painted a lake sunrise last year."
)


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
async def test_a_small_model_is_asked_the_compact_way_and_kept_to_the_turns_words(
    which: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from kg.ingest.alignment import content_words

    running: LocalLLMServer = request.getfixturevalue("server" if which == "smollm2" else "gemma")
    wire = Wire()
    llm = OpenAILLM(
        running.alias,
        base_url=running.base_url,
        http_client=wire.client(),
        max_retries=1,
        timeout=300,
        max_tokens=320,
    )
    episode = Episode(
        source="message",
        content=SMALL_TURN,
        reference_time=datetime(2023, 5, 8, 13, 56, tzinfo=UTC),
    )
    async with await KG.open(home=tmp_path / "kg", llm=llm) as kg:
        with contextlib.suppress(ExtractionError):  # failed and recorded is an outcome too
            await kg.add_episode(episode)
        node = await kg.store.episode_by_hash("default", content_hash(episode))
        assert node is not None and node.status in (EpisodeStatus.ingested, EpisodeStatus.failed)
        versions = await kg.history(limit=1000)
        assert all(v.edge.episodes == [node.uuid] for v in versions)
        said = content_words(SMALL_TURN)
        for v in versions:  # whatever the model said, only names the turn gives are kept
            for name in (v.subject, v.object):
                assert name in ("Caroline", "Melanie") or content_words(name) & said
    sent = [s for s in wire.sent if s["response_format"]["type"] == "json_object"]
    assert sent and "CompactFact" in json.dumps(sent[0]["response_format"]["schema"])
    assert sent[0]["messages"][-1]["content"] == f"EPISODE:\n{SMALL_TURN}"


async def test_doctor_reports_on_the_real_server(server: LocalLLMServer) -> None:
    from kg.ingest.doctor import diagnose

    llm = OpenAILLM(MODEL, base_url=server.base_url, max_retries=1, timeout=300, max_tokens=320)
    report = await diagnose(llm, turns=2)
    assert (report.profile, report.json_mode, report.turns) == ("small", "json_object_schema", 2)
    assert report.calls >= 2 and 0 <= report.valid_replies <= report.calls
    assert report.facts_kept <= report.facts_proposed and report.seconds_per_call > 0
