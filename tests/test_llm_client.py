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
    Slots,
    clean_reply,
)


class Person(BaseModel):
    name: str
    age: int


def completion(
    content: str, prompt_tokens: int = 11, completion_tokens: int = 7, finish: str = "stop"
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": finish,
                "message": {"role": "assistant", "content": content},
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


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
        return OpenAILLM(
            "qwen2.5-7b-instruct", base_url="http://127.0.0.1:8000/v1", http_client=http, **kw
        )

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


async def test_a_reply_cut_at_the_token_cap_is_not_retried() -> None:
    server = Server(
        (200, completion('{"name": "Alice", "a', 30, 8, finish="length")),
        (200, completion('{"name": "Alice", "age": 31}')),
    )
    with pytest.raises(LLMOutputError) as caught:
        await server.client(max_tokens=8).structured(MESSAGES, Person, purpose="extract")
    assert len(server.requests) == 1 and [c.cut for c in caught.value.calls] == [True]
    assert "cut at the 8-token cap (max_tokens)" in str(caught.value)


async def test_a_cut_reply_that_validates_is_kept() -> None:
    server = Server((200, completion('{"name": "Alice", "age": 31}', finish="length")))
    value, calls = await server.client().structured(MESSAGES, Person, purpose="extract")
    assert value.age == 31 and calls[0].cut and calls[0].valid


async def test_concurrency_is_bounded() -> None:
    server = Server(*[(200, completion('{"name": "A", "age": 1}'))] * 6)
    server.delay = 0.02
    llm = server.client(max_concurrency=2)
    await asyncio.gather(*[llm.structured(MESSAGES, Person, purpose="x") for _ in range(6)])
    assert server.max_in_flight == 2


async def test_a_resolution_call_takes_the_next_slot_ahead_of_waiting_extractions() -> None:
    # One slot, an extraction in flight, two more extractions queued, then a resolution
    # call: resolution runs under a group's writer lock, so it is sent next.
    server = Server(*[(200, completion('{"name": "A", "age": 1}'))] * 4)
    server.delay = 0.05
    llm = server.client(max_concurrency=1)

    async def call(text: str, purpose: str) -> None:
        await llm.structured([{"role": "user", "content": text}], Person, purpose=purpose)

    first = asyncio.create_task(call("x1", "extract"))
    await asyncio.sleep(0.01)  # x1 holds the slot
    queued = [asyncio.create_task(call(f"x{i}", "extract")) for i in (2, 3)]
    await asyncio.sleep(0.01)
    urgent = asyncio.create_task(call("r", "resolve"))
    await asyncio.gather(first, *queued, urgent)
    sent = [json.loads(r.content)["messages"][-1]["content"] for r in server.requests]
    assert sent == ["x1", "r", "x2", "x3"]
    assert server.max_in_flight == 1


async def test_a_cancelled_waiter_gives_its_slot_on() -> None:
    slots = Slots(1)
    held = asyncio.Event()
    done = asyncio.Event()

    async def hold() -> None:
        async with slots.take():
            held.set()
            await done.wait()

    holder = asyncio.create_task(hold())
    await held.wait()
    waiters = [asyncio.create_task(slots.take(urgent=u).__aenter__()) for u in (True, False)]
    await asyncio.sleep(0)
    waiters[0].cancel()  # the urgent one gives up before the slot is free
    done.set()
    await holder
    await asyncio.wait_for(waiters[1], 1)  # the slot went on to the normal waiter
    assert waiters[0].cancelled()


async def test_scripted_client_shares_the_validation_path() -> None:
    llm = ScriptedLLM(
        [
            '<think>hm</think>{"name": "A", "age": "x"}',
            lambda msgs: json.dumps({"name": "A", "age": len(msgs)}),
        ]
    )
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
        fact = {
            "subject": subject,
            "predicate": "LIKES",
            "object": "Jazz",
            "fact": f"{subject} likes jazz",
            "quote": quote,
        }
        return completion(json.dumps({"entities": [], "facts": [fact]}))

    server = Server(
        (200, extraction("Minji Kim", "I like jazz")),
        (200, extraction("Minji", "jazz, always")),
        (200, completion(json.dumps({"entities": [{"name": "N1", "same_as": "E1"}]}))),
    )
    async with await KG.open(home=tmp_path / "kg", llm=server.client()) as kg:
        when = datetime(2024, 1, 1, tzinfo=UTC)
        await kg.add_episode(
            source="message", content="Minji Kim: I like jazz.", reference_time=when
        )
        r = await kg.add_episode(
            source="message", content="Minji: jazz, always.", reference_time=when.replace(month=2)
        )
        names = [server.body(i)["response_format"]["json_schema"]["name"] for i in range(3)]
        assert names == ["Extraction", "Extraction", "Resolution"]
        assert "N1: 'Minji'" in server.body(2)["messages"][1]["content"]
        assert (r.summary.llm_calls, r.summary.entities_merged) == (2, 1)
        assert r.summary.prompt_tokens == 22  # both calls' usage, as the server reported it
        assert (await kg.stats()).entities == 2  # Minji Kim and Jazz


# -- finding the reply format each endpoint accepts -------------------------------------------

LLAMA_CPP_REFUSAL = {  # what llama-cpp-python's server answers to `json_schema`, verbatim shape
    "error": {
        "message": "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
        "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}]",
        "type": "internal_server_error",
    },
}


def mode_of(body: dict[str, Any]) -> str:
    """Which of kg's reply formats a request used, read off the wire."""
    fmt = body.get("response_format")
    if fmt is None:
        return "prompt"
    if fmt["type"] == "json_schema":
        return "json_schema"
    return "json_object_schema" if "schema" in fmt else "json_object"


class PickyServer(Server):
    """Refuses the reply formats in `refuse` (as the status it is given), answers the rest."""

    def __init__(self, refuse: dict[str, int], reply: str = '{"name": "Alice", "age": 31}') -> None:
        super().__init__()
        self.refuse = refuse
        self.reply = reply

    async def handler(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        mode = mode_of(json.loads(request.content))
        if mode in self.refuse:
            status = self.refuse[mode]
            refusal = {"error": {"message": f"response_format of type {mode} is not supported"}}
            body = LLAMA_CPP_REFUSAL if status == 500 else refusal
            return httpx2.Response(status, json=body)
        return httpx2.Response(200, json=completion(self.reply))

    def modes(self) -> list[str]:
        return [mode_of(self.body(i)) for i in range(len(self.requests))]


SCHEMA_NOTE = "validates against this JSON schema"


async def test_llama_cpp_refusal_falls_back_to_json_object_with_schema() -> None:
    server = PickyServer({"json_schema": 500})
    llm = server.client()
    assert llm.json_mode is None
    value, calls = await llm.structured(MESSAGES, Person, purpose="extract")
    assert value == Person(name="Alice", age=31)
    # The refusal costs one round trip: no transport retries of its 500.
    assert server.modes() == ["json_schema", "json_object_schema"]
    assert server.body(1)["response_format"] == {
        "type": "json_object",
        "schema": Person.model_json_schema(),
    }
    assert server.body(1)["messages"] == MESSAGES  # the server holds the schema: no prompt note
    assert llm.json_mode == "json_object_schema"
    assert len(calls) == 1  # a refused request is not a model call
    await llm.structured(MESSAGES, Person, purpose="extract")
    assert server.modes()[2:] == ["json_object_schema"]  # remembered: no second walk


@pytest.mark.parametrize("refused", [0, 1, 2, 3])
async def test_each_refusal_steps_down_once_and_the_accepted_mode_is_kept(refused: int) -> None:
    order = ["json_schema", "json_object_schema", "json_object", "prompt"]
    server = PickyServer(dict.fromkeys(order[:refused], 400))
    llm = server.client()
    value, _ = await llm.structured(MESSAGES, Person, purpose="extract")
    assert value.age == 31
    assert server.modes() == order[: refused + 1]
    assert llm.json_mode == order[refused]
    last = server.body(refused)
    if order[refused] in ("json_object", "prompt"):  # the schema travels in the prompt
        system = last["messages"][0]
        assert system["role"] == "system" and SCHEMA_NOTE in system["content"]
        assert json.dumps(Person.model_json_schema(), separators=(",", ":")) in system["content"]
        assert last["messages"][1:] == MESSAGES
    else:
        assert last["messages"] == MESSAGES
    for _ in range(2):
        await llm.structured(MESSAGES, Person, purpose="extract")
    assert server.modes()[refused + 1 :] == [order[refused]] * 2


async def test_schema_note_joins_an_existing_system_message() -> None:
    server = PickyServer({"json_schema": 400, "json_object_schema": 400})
    messages = [{"role": "system", "content": "Extract."}, *MESSAGES]
    await server.client().structured(messages, Person, purpose="extract")
    sent = server.body(2)["messages"]
    assert len(sent) == 2 and sent[0]["content"].startswith("Extract.\n\n")
    assert SCHEMA_NOTE in sent[0]["content"] and sent[1] == MESSAGES[0]


async def test_a_corrective_retry_uses_the_mode_found() -> None:
    server = PickyServer({"json_schema": 500})
    replies = iter(['{"name": "Alice"}', '{"name": "Alice", "age": 31}'])
    server.reply = ""

    async def handler(request: httpx2.Request) -> httpx2.Response:
        if mode_of(json.loads(request.content)) == "json_schema":
            return await PickyServer.handler(server, request)
        server.requests.append(request)
        return httpx2.Response(200, json=completion(next(replies)))

    server.handler = handler  # type: ignore[method-assign]
    _, calls = await server.client().structured(MESSAGES, Person, purpose="extract")
    assert [c.valid for c in calls] == [False, True]
    assert server.modes() == ["json_schema", "json_object_schema", "json_object_schema"]


async def test_every_format_refused_fails_cleanly_and_remembers_nothing() -> None:
    server = PickyServer(
        dict.fromkeys(["json_schema", "json_object_schema", "json_object", "prompt"], 400)
    )
    llm = server.client()
    with pytest.raises(LLMError, match="refused every structured reply format") as caught:
        await llm.structured(MESSAGES, Person, purpose="extract")
    assert not isinstance(caught.value, LLMOutputError | LLMUnavailableError)
    for mode in ("json_schema", "json_object_schema", "json_object", "prompt"):  # each reason
        assert f"{mode}: Error code: 400 - response_format of type {mode} " in str(caught.value)
    assert llm.json_mode is None and len(server.requests) == 4


async def test_a_transient_error_while_probing_is_retried_not_taken_for_a_refusal() -> None:
    server = Server(
        (503, {"error": {"message": "overloaded"}}, {"retry-after-ms": "5"}),
        (200, completion('{"name": "Alice", "age": 31}')),
    )
    llm = server.client()
    await llm.structured(MESSAGES, Person, purpose="extract")
    assert [mode_of(server.body(i)) for i in range(2)] == ["json_schema", "json_schema"]
    assert llm.json_mode == "json_schema"


async def test_an_unrelated_client_error_while_probing_is_not_a_refusal() -> None:
    server = Server((404, {"error": {"message": "model 'x' not found"}}))
    llm = server.client()
    with pytest.raises(LLMError, match="refused the request \\(404\\)"):
        await llm.structured(MESSAGES, Person, purpose="extract")
    assert len(server.requests) == 1 and llm.json_mode is None


async def test_concurrent_first_requests_walk_the_formats_once() -> None:
    server = PickyServer({"json_schema": 500})
    llm = server.client(max_concurrency=4)
    await asyncio.gather(*[llm.structured(MESSAGES, Person, purpose="x") for _ in range(4)])
    assert server.modes() == ["json_schema"] + ["json_object_schema"] * 4


async def test_the_mode_is_kept_per_endpoint_and_can_be_pinned() -> None:
    server = PickyServer({"json_schema": 500})
    llm = server.client()
    await llm.structured(MESSAGES, Person, purpose="x")
    llm.model = "another-model"  # another endpoint as far as the memory goes
    assert llm.json_mode is None
    pinned = PickyServer({})
    await pinned.client(json_mode="json_object").structured(MESSAGES, Person, purpose="x")
    assert pinned.modes() == ["json_object"]
    with pytest.raises(ValueError, match="json_mode must be one of"):
        OpenAILLM("m", base_url="http://127.0.0.1:1/v1", json_mode="grammar")  # type: ignore[arg-type]


async def test_a_remembered_mode_that_is_later_refused_is_found_again() -> None:
    server = PickyServer({"json_schema": 500})
    # e.g. the server behind the URL was swapped: a known mode's 500 is retried as usual, then
    # recognised as a refusal, and the walk starts again from the top.
    llm = server.client(json_mode="json_schema", max_retries=1)
    value, _ = await llm.structured(MESSAGES, Person, purpose="x")
    assert value.age == 31
    assert server.modes() == ["json_schema"] * 3 + ["json_object_schema"]
    assert llm.json_mode == "json_object_schema"


async def test_the_schema_sent_requires_every_field_and_validation_does_not() -> None:
    """A grammar built from the schema must not let a small model stop before `facts`."""
    from kg.schemas.extraction import Extraction

    server = PickyServer({"json_schema": 500}, reply='{"entities": [{"name": "Caroline"}]}')
    value, _ = await server.client().structured(MESSAGES, Extraction, purpose="extract")
    assert value.facts == [] and value.entities[0].type is None  # missing fields still accepted
    sent = server.body(1)["response_format"]["schema"]
    assert sent["required"] == ["entities", "facts"]
    fact = sent["$defs"]["ExtractedFact"]
    assert fact["required"] == list(fact["properties"])
    assert (
        "valid_at" in fact["required"]
        and {"type": "null"} in fact["properties"]["valid_at"]["anyOf"]
    )
    assert "required" not in Extraction.model_json_schema()  # the model class is untouched


async def test_max_tokens_is_sent_only_when_set() -> None:
    server = PickyServer({})
    await server.client().structured(MESSAGES, Person, purpose="x")
    await server.client(max_tokens=300).structured(MESSAGES, Person, purpose="x")
    assert "max_tokens" not in server.body(0) and server.body(1)["max_tokens"] == 300
