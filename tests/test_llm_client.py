"""The OpenAI-backed client through the real `openai` package, over a mocked HTTP transport."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

try:  # the openai client's own HTTP library: httpx2 in openai >= 3, httpx before
    import httpx2
except ImportError:  # pragma: no cover
    import httpx as httpx2  # type: ignore[no-redef]
from pydantic import BaseModel

from kg.ingest.llm import (
    LLMError,
    LLMOutputError,
    LLMUnavailableError,
    OpenAILLM,
    ScriptedLLM,
    clean_reply,
)


class Person(BaseModel):
    name: str
    age: int


def completion(content: str, prompt_tokens: int = 11, completion_tokens: int = 7) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }  # fmt: skip


class Server:
    """A scripted HTTP endpoint: each request takes the next (status, body, headers)."""

    def __init__(self, *responses: tuple[int, Any] | tuple[int, Any, dict[str, str]]) -> None:
        self.responses = list(responses)
        self.requests: list[httpx2.Request] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.delay = 0.0

    async def handler(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            status, body, *headers = self.responses.pop(0)
            return httpx2.Response(status, json=body, headers=headers[0] if headers else None)
        finally:
            self.in_flight -= 1

    def client(self, **kw: Any) -> OpenAILLM:
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(self.handler))
        return OpenAILLM("qwen2.5-7b-instruct", base_url="http://127.0.0.1:8000/v1",
                         http_client=http, **kw)  # fmt: skip

    def body(self, i: int) -> dict[str, Any]:
        return json.loads(self.requests[i].content)


MESSAGES = [{"role": "user", "content": "Alice is 31."}]


async def test_request_shape_and_parsing() -> None:
    server = Server((200, completion('{"name": "Alice", "age": 31}', 42, 9)))
    value, calls = await server.client().structured(MESSAGES, Person, purpose="extract")
    assert value == Person(name="Alice", age=31)
    request = server.requests[0]
    assert str(request.url) == "http://127.0.0.1:8000/v1/chat/completions"
    body = server.body(0)
    assert body["model"] == "qwen2.5-7b-instruct"
    assert body["messages"] == MESSAGES
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["name"] == "Person"
    assert body["response_format"]["json_schema"]["schema"] == Person.model_json_schema()
    assert body["temperature"] == 0.0
    [call] = calls
    assert (call.prompt_tokens, call.completion_tokens, call.attempt, call.valid) == (
        42,
        9,
        1,
        True,
    )
    assert call.model == "qwen2.5-7b-instruct" and call.purpose == "extract"
    assert call.latency_ms >= 0


async def test_think_blocks_and_fences_are_stripped() -> None:
    reply = (
        '<think>The user says 31, so age=31.</think>\n```json\n{"name": "Alice", "age": 31}\n```'
    )
    server = Server((200, completion(reply)))
    value, _ = await server.client().structured(MESSAGES, Person, purpose="extract")
    assert value.age == 31
    assert clean_reply("<think>unclosed reasoning that never ends") == ""


async def test_rate_limit_is_retried_with_backoff() -> None:
    server = Server(
        (429, {"error": {"message": "slow down", "type": "rate_limit"}}, {"retry-after-ms": "5"}),
        (503, {"error": {"message": "overloaded"}}, {"retry-after-ms": "5"}),
        (200, completion('{"name": "Alice", "age": 31}')),
    )
    value, calls = await server.client().structured(MESSAGES, Person, purpose="extract")
    assert value.name == "Alice"
    assert len(server.requests) == 3  # transport-level retries, one logical call
    assert len(calls) == 1


async def test_persistent_server_errors_fail_cleanly() -> None:
    server = Server(*[(500, {"error": {"message": "boom"}}, {"retry-after-ms": "1"})] * 3)
    with pytest.raises(LLMUnavailableError, match="failed after retries"):
        await server.client(max_retries=2).structured(MESSAGES, Person, purpose="extract")
    assert len(server.requests) == 3


async def test_a_client_error_is_not_retried() -> None:
    server = Server((400, {"error": {"message": "bad model"}}))
    with pytest.raises(LLMError, match="refused the request \\(400\\)"):
        await server.client().structured(MESSAGES, Person, purpose="extract")
    assert len(server.requests) == 1


async def test_invalid_reply_is_retried_once_with_the_error() -> None:
    server = Server(
        (200, completion('{"name": "Alice", "age": "thirty-one"}')),
        (200, completion('{"name": "Alice", "age": 31}')),
    )
    value, calls = await server.client().structured(MESSAGES, Person, purpose="extract")
    assert value.age == 31
    assert [c.valid for c in calls] == [False, True]
    retry = server.body(1)["messages"]
    assert retry[:1] == MESSAGES
    assert retry[1] == {"role": "assistant", "content": '{"name": "Alice", "age": "thirty-one"}'}
    assert "age" in retry[2]["content"] and "did not match" in retry[2]["content"]


async def test_invalid_twice_raises_with_the_calls_spent() -> None:
    server = Server((200, completion("not json")), (200, completion('{"name": 1}')))
    with pytest.raises(LLMOutputError) as caught:
        await server.client().structured(MESSAGES, Person, purpose="extract")
    assert len(caught.value.calls) == 2 and caught.value.raw == '{"name": 1}'
    assert "Person" in str(caught.value)


async def test_concurrency_is_bounded() -> None:
    server = Server(*[(200, completion('{"name": "A", "age": 1}'))] * 6)
    server.delay = 0.02
    llm = server.client(max_concurrency=2)
    await asyncio.gather(*[llm.structured(MESSAGES, Person, purpose="x") for _ in range(6)])
    assert server.max_in_flight == 2


async def test_scripted_client_shares_the_validation_path() -> None:
    llm = ScriptedLLM([
        '<think>hm</think>{"name": "A", "age": "x"}',
        lambda msgs: json.dumps({"name": "A", "age": len(msgs)}),
    ])  # fmt: skip
    value, calls = await llm.structured(MESSAGES, Person, purpose="extract")
    assert value.age == 3  # the retry conversation: user, bad assistant reply, correction
    assert [c.valid for c in calls] == [False, True]
    assert len(llm.requests) == 2
    with pytest.raises(LLMUnavailableError, match="no reply left"):
        await llm.structured(MESSAGES, Person, purpose="extract")


async def test_extraction_then_resolution_through_the_real_client(tmp_path: Any) -> None:
    """add_episode over HTTP: the extraction call, then the resolution call with its own JSON
    schema, and the merge it decides, all through the `openai` package."""
    from datetime import UTC, datetime

    from kg import KG

    def extraction(subject: str, quote: str) -> dict[str, Any]:
        fact = {"subject": subject, "predicate": "LIKES", "object": "Jazz",
                "fact": f"{subject} likes jazz", "quote": quote}  # fmt: skip
        return completion(json.dumps({"entities": [], "facts": [fact]}))

    server = Server(
        (200, extraction("Minji Kim", "I like jazz")),
        (200, extraction("Minji", "jazz, always")),
        (200, completion(json.dumps({"entities": [{"name": "N1", "same_as": "E1"}]}))),
    )
    async with await KG.open(home=tmp_path / "kg", llm=server.client()) as kg:
        when = datetime(2024, 1, 1, tzinfo=UTC)
        await kg.add_episode(source="message", content="Minji Kim: I like jazz.",
                             reference_time=when)  # fmt: skip
        r = await kg.add_episode(source="message", content="Minji: jazz, always.",
                                 reference_time=when.replace(month=2))  # fmt: skip
        names = [server.body(i)["response_format"]["json_schema"]["name"] for i in range(3)]
        assert names == ["Extraction", "Extraction", "Resolution"]
        assert "N1: 'Minji'" in server.body(2)["messages"][1]["content"]
        assert (r.summary.llm_calls, r.summary.entities_merged) == (2, 1)
        assert r.summary.prompt_tokens == 22  # both calls' usage, as the server reported it
        assert (await kg.stats()).entities == 2  # Minji Kim and Jazz
