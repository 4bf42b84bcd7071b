"""Per-model prompt profiles: a small model is asked the compact way, on the real client too."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

try:  # the openai client's own HTTP library: httpx2 in openai >= 3, httpx before
    import httpx2
except ImportError:  # pragma: no cover
    import httpx as httpx2  # type: ignore[no-redef]

from kg import KG
from kg.ingest.llm import OpenAILLM, ScriptedLLM
from kg.ingest.profiles import profile_for
from tests.test_llm_client import LLAMA_CPP_REFUSAL, completion

WHEN = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
CHAT = "Caroline: I went to a LGBTQ support group yesterday and it was so powerful."
COMPACT = json.dumps(
    {
        "facts": [
            {
                "quote": "I went to an LGBTQ support group",
                "subject": "Caroline",
                "predicate": "ATTENDED",
                "object": "LGBTQ support group",
                "fact": "Caroline went to an LGBTQ support group.",
                "valid_at": "yesterday",
            },
        ]
    }
)


@pytest.mark.parametrize(
    ("model", "profile"),
    [
        ("smollm2-135m-instruct", "small"),
        ("gemma-3-270m", "small"),
        ("SmolLM2-360M", "small"),
        ("qwen2.5-0.5b-instruct", "small"),
        ("gpt-4o-mini", "default"),
        ("qwen2.5-7b-instruct", "default"),
        ("llama-3.1-70b", "default"),
    ],
)
def test_the_profile_is_chosen_by_the_model_name(model: str, profile: str) -> None:
    assert profile_for(model).name == profile


def test_a_profile_can_be_named_and_an_unknown_one_is_refused_at_once() -> None:
    assert ScriptedLLM([], model="gpt-4o", prompt_profile="small").prompt_profile == "small"
    with pytest.raises(ValueError, match="unknown prompt profile 'tiny'"):
        OpenAILLM("m", base_url="http://127.0.0.1:1/v1", prompt_profile="tiny")


class LlamaCpp:
    """llama-cpp-python's server as kg meets it: refuses `json_schema`, takes `json_object`
    with the schema beside it (its grammar), answers with `reply`."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.bodies: list[dict[str, Any]] = []

    async def handler(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        if body["response_format"]["type"] == "json_schema":
            return httpx2.Response(500, json=LLAMA_CPP_REFUSAL)
        return httpx2.Response(200, json=completion(self.reply, 420, 60))

    def client(self, model: str) -> OpenAILLM:
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(self.handler))
        return OpenAILLM(model, base_url="http://127.0.0.1:8080/v1", http_client=http)


async def test_a_small_model_gets_the_compact_grammar_and_examples_over_http(
    tmp_path: Path,
) -> None:
    server = LlamaCpp(COMPACT)
    async with await KG.open(
        home=tmp_path / "kg", llm=server.client("smollm2-135m-instruct")
    ) as kg:
        await kg.add_episode(
            source="message", content="Caroline: Hi Mel!", reference_time=WHEN, extract=False
        )  # context the small profile leaves out
        r = await kg.add_episode(
            source="message", content=CHAT, reference_time=WHEN.replace(minute=57)
        )
        assert r.summary.facts_added == 1 and r.summary.facts_dropped == {}
        [f] = await kg.facts(subject="Caroline")
        assert f.object == "LGBTQ support group"
        assert f.edge.valid_at == datetime(2023, 5, 7, tzinfo=UTC)  # "yesterday", by kg
    sent = server.bodies[-1]
    schema = sent["response_format"]["schema"]
    assert sent["response_format"]["type"] == "json_object"  # the grammar llama.cpp builds
    assert (
        list(schema["properties"]) == ["facts"] and schema["properties"]["facts"]["maxItems"] == 2
    )
    fact = schema["$defs"]["CompactFact"]
    assert next(iter(fact["properties"])) == "quote" and fact["properties"]["quote"]["maxLength"]
    assert set(fact["required"]) == set(fact["properties"])  # the grammar cannot stop early
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert sent["messages"][-1]["content"] == f"EPISODE:\n{CHAT}"
    assert "Hi Mel" not in json.dumps(sent["messages"])  # no earlier episodes
    for m in sent["messages"][2:5:2]:  # the worked examples are valid replies of that schema
        assert set(json.loads(m["content"])) == {"facts"}


async def test_a_large_model_is_still_asked_the_full_way(tmp_path: Path) -> None:
    full = json.dumps(
        {
            "entities": [],
            "facts": [
                {
                    "subject": "I",
                    "predicate": "ATTENDED",
                    "object": "LGBTQ support group",
                    "fact": "Caroline went to an LGBTQ support group",
                    "quote": "I went to a LGBTQ support group",
                }
            ],
        }
    )
    server = LlamaCpp(full)
    async with await KG.open(home=tmp_path / "kg", llm=server.client("qwen2.5-7b-instruct")) as kg:
        r = await kg.add_episode(source="message", content=CHAT, reference_time=WHEN)
        assert r.summary.facts_added == 1
    sent = server.bodies[-1]
    assert set(sent["response_format"]["schema"]["properties"]) == {"entities", "facts"}
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]


async def test_the_scripted_client_takes_the_same_small_path(tmp_path: Path) -> None:
    llm = ScriptedLLM([COMPACT], model="gemma-3-270m")
    async with await KG.open(home=tmp_path / "kg", llm=llm) as kg:
        r = await kg.add_episode(source="message", content=CHAT, reference_time=WHEN)
        assert r.summary.facts_added == 1
    assert llm.requests[0][-1]["content"] == f"EPISODE:\n{CHAT}"


async def test_a_small_models_invalid_reply_fails_the_episode_cleanly(tmp_path: Path) -> None:
    from kg.errors import ExtractionError
    from kg.ingest import content_hash
    from kg.schemas.episode import Episode
    from kg.schemas.graph import EpisodeStatus

    llm = ScriptedLLM(['{"facts": [{"quote": 3}]}', "not json"], model="smollm2-135m-instruct")
    async with await KG.open(home=tmp_path / "kg", llm=llm) as kg:
        with pytest.raises(ExtractionError, match="CompactExtraction"):
            await kg.add_episode(source="message", content=CHAT, reference_time=WHEN)
        episode = Episode(source="message", content=CHAT, reference_time=WHEN)
        node = await kg.store.episode_by_hash("default", content_hash(episode))
        assert node is not None and node.status is EpisodeStatus.failed
        assert (await kg.history()) == [] and len(llm.requests) == 2  # one corrective retry
