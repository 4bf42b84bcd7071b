"""LLM clients for the write path: one interface, structured (JSON-schema) replies.

Small local models wrap JSON in `<think>` blocks and code fences, or drift from the schema.
So every reply is cleaned, validated against the pydantic model, and on failure asked for
once more with the validation error in the prompt, before `LLMOutputError` fails the
episode cleanly. Every call is recorded (model, tokens, latency, attempt), since kg promises
a budget of LLM calls per episode and reports what it spent.

`OpenAILLM` speaks to any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp) via
`base_url`, finding which structured reply format each one accepts; `ScriptedLLM` replays
canned replies through the same validation path for tests.
"""

from __future__ import annotations

import abc
import asyncio
import json
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from contextvars import ContextVar
from typing import Any, Literal, NamedTuple, TypeVar
from urllib.parse import urlparse

from pydantic import BaseModel, ValidationError

from kg.ingest.profiles import profile_for
from kg.schemas.validation import validation_message

log = logging.getLogger("kg.llm")
T = TypeVar("T", bound=BaseModel)
Message = dict[str, str]

# Calls made on a group's ordered write path (resolution runs under the group's writer lock,
# extraction does not): they take the next free request slot ahead of waiting extractions, so
# a pipelined worker's writes do not queue behind the extractions it started for later
# episodes (kg.queue).
URGENT_PURPOSES = frozenset({"resolve"})
_URGENT: ContextVar[bool] = ContextVar("kg_llm_urgent", default=False)

_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S | re.I)


class LLMError(Exception):
    """Base class for LLM failures; the episode is not written."""


class LLMOutputError(LLMError):
    """The model's reply did not validate, even after one corrective retry."""

    def __init__(self, message: str, raw: str, calls: list[LLMCall]) -> None:
        super().__init__(message)
        self.raw = raw
        self.calls = calls


class LLMUnavailableError(LLMError):
    """The endpoint could not be reached or kept failing after retries with backoff."""


class LLMCall(BaseModel):
    """One request to the model, as reported in an episode's cost summary."""

    purpose: str
    model: str
    attempt: int
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    valid: bool
    cut: bool = False  # the reply stopped at the client's `max_tokens` cap


class Completion(NamedTuple):
    """One model reply. `cut`: the server stopped it at the token cap (finish_reason
    "length"), so an invalid reply is unfinished rather than wrong."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cut: bool = False


class Slots:
    """A semaphore whose urgent waiters are served before the others (each kind in order)."""

    def __init__(self, n: int) -> None:
        self._free = n
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._normal: deque[asyncio.Future[None]] = deque()

    @asynccontextmanager
    async def take(self, urgent: bool = False) -> AsyncIterator[None]:
        await self._acquire(urgent)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, urgent: bool) -> None:
        if self._free > 0 and not self._urgent and not self._normal:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line = self._urgent if urgent else self._normal
        line.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed a slot just as it was cancelled: pass it on
            with suppress(ValueError):
                line.remove(waiter)
            raise

    def _release(self) -> None:
        for line in (self._urgent, self._normal):
            while line:
                waiter = line.popleft()
                if not waiter.done():
                    waiter.set_result(None)  # the slot passes straight to it
                    return
        self._free += 1


def clean_reply(text: str) -> str:
    """Drop reasoning blocks and a surrounding code fence; keep the JSON."""
    text = _THINK.sub("", text).strip()
    fenced = _FENCE.match(text)
    return fenced.group(1) if fenced else text


def _correction(raw: str, error: str) -> list[Message]:
    return [
        {"role": "assistant", "content": raw},
        {
            "role": "user",
            "content": "Your reply did not match the required JSON schema: "
            f"{error}\nReply again with only the corrected JSON object.",
        },
    ]


def _check_base_url(url: str) -> None:
    """An http(s) URL with a host and a usable port, or a ValueError naming it (instead of the
    client's failure later, or a 'Connection error' after every retry)."""
    try:
        parsed = urlparse(url)
        parsed.port  # noqa: B018 - parsing the port is the check
    except ValueError as exc:
        raise ValueError(f"base URL {url!r}: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"base URL {url!r} is not an http:// or https:// URL with a host")


class StructuredLLM(abc.ABC):
    """Validation and one corrective retry, shared by every client."""

    model: str
    # Requests this client lets run at once: background ingestion pipelines up to this many
    # extractions (kg.queue).
    max_concurrency: int = 4
    # How extraction asks this model (kg.ingest.profiles); None: chosen by the model's name.
    prompt_profile: str | None = None

    @abc.abstractmethod
    async def _complete(
        self, messages: list[Message], schema: type[BaseModel], name: str
    ) -> Completion | tuple[str, int, int]:
        """One model call: (reply text, prompt tokens, completion tokens[, cut])."""

    async def structured(
        self, messages: Sequence[Message], schema: type[T], *, purpose: str, max_attempts: int = 2
    ) -> tuple[T, list[LLMCall]]:
        """Validated reply; `max_attempts` = 1 skips the corrective retry (budget spent).

        A reply cut at the token cap gets no corrective retry either: the retry carries the
        cut reply and asks for the same answer under the same cap, and weak models then cut
        again (a third of SmolLM2-135M's calls at a 320-token cap were such retries).
        """
        if max_attempts not in (1, 2):
            raise ValueError(f"max_attempts must be 1 or 2, got {max_attempts}")
        convo = list(messages)
        calls: list[LLMCall] = []
        raw = ""
        for attempt in range(1, max_attempts + 1):
            t0 = time.perf_counter()
            urgent = _URGENT.set(purpose in URGENT_PURPOSES)  # seen by the client's slots
            try:
                reply = Completion(*await self._complete(convo, schema, schema.__name__))
            finally:
                _URGENT.reset(urgent)
            raw = reply.text
            latency = (time.perf_counter() - t0) * 1000
            try:
                value = schema.model_validate_json(clean_reply(raw))
                error = None
            except ValidationError as exc:
                value, error = None, validation_message(exc, limit=5)
            calls.append(
                LLMCall(
                    purpose=purpose,
                    model=self.model,
                    attempt=attempt,
                    prompt_tokens=reply.prompt_tokens,
                    completion_tokens=reply.completion_tokens,
                    latency_ms=round(latency, 2),
                    valid=error is None,
                    cut=reply.cut,
                )
            )
            if value is not None:
                return value, calls
            assert error is not None
            if reply.cut:
                raise LLMOutputError(
                    f"{purpose}: the model's reply was cut at the {reply.completion_tokens}-token"
                    f" cap (max_tokens) before it matched {schema.__name__}: {error}",
                    raw,
                    calls,
                )
            convo = [*list(messages), *_correction(raw, error)]
        raise LLMOutputError(
            f"{purpose}: the model's reply did not match {schema.__name__}"
            + (" after a corrective retry" if max_attempts > 1 else "")
            + f": {error}",
            raw,
            calls,
        )


JsonMode = Literal["json_schema", "json_object_schema", "json_object", "prompt"]
# Strongest first. Servers differ: llama-cpp-python's rejects `json_schema` (500, "Input
# should be 'text' or 'json_object'") but constrains `json_object` by a `schema` beside it;
# others take `json_object` alone, and a few no `response_format` at all.
JSON_MODES: tuple[JsonMode, ...] = ("json_schema", "json_object_schema", "json_object", "prompt")
# A status error naming the reply format is the server refusing the mode, not failing.
PROBE_RETRY_DELAY = 0.5  # seconds, the `openai` client's first backoff
_FORMAT_REFUSAL = re.compile(r"response_format|json_schema|json_object", re.I)


class _FormatRefused(Exception):
    def __init__(self, mode: JsonMode, detail: str) -> None:
        super().__init__(detail)
        self.mode = mode


def wire_schema(schema: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema as sent: every property required (optional ones may be null).

    A server that turns the schema into a grammar lets the model stop wherever the schema
    allows, and a small model stops early: with `facts` optional, SmolLM2 answered only
    `{"entities": [...]}` for every LoCoMo turn. Validation still accepts a missing field.
    """
    spec = schema.model_json_schema()
    for node in [spec, *spec.get("$defs", {}).values()]:
        if "properties" in node:
            node["required"] = list(node["properties"])
    return spec


def _with_schema_prompt(messages: list[Message], schema: type[BaseModel]) -> list[Message]:
    """For servers that cannot be told the schema: say it in the system message."""
    spec = json.dumps(wire_schema(schema), separators=(",", ":"))
    note = f"Reply with one JSON object that validates against this JSON schema:\n{spec}"
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{note}"}, *messages[1:]]
    return [{"role": "system", "content": note}, *messages]


def _response_format(mode: JsonMode, schema: type[BaseModel], name: str) -> Any:
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "schema": wire_schema(schema)}}
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": wire_schema(schema)}
    if mode == "json_object":
        return {"type": "json_object"}
    return None


class OpenAILLM(StructuredLLM):
    """Chat completions with a structured reply, on the official `openai` client.

    The reply format is found per endpoint: `json_schema`, else `json_object` with the schema
    beside it, else plain `json_object` with the schema in the prompt, else the schema in the
    prompt alone. The first request walks down that list (without transport retries, so a
    refusal costs one round trip) and the mode the server accepted is kept for every later
    request to the same base URL and model; `json_mode=` pins one and skips the walk.
    `prompt_profile` names how extraction asks this model (kg.ingest.profiles; default: by
    the model's name, so a 135M model gets the compact prompt). However
    weak the format, the reply is still validated and vetted by kg before anything is stored.

    Retries with backoff on 429 and 5xx (honouring Retry-After) are the `openai` client's own;
    `max_concurrency` bounds requests in flight from this process. `max_tokens` caps each
    reply: a small model with no grammar can write until its context is full, and a reply cut
    short fails validation like any other.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_concurrency: int = 4,
        max_retries: int = 4,
        timeout: float = 120.0,
        temperature: float = 0.0,
        http_client: Any = None,
        json_mode: JsonMode | None = None,
        max_tokens: int | None = None,
        prompt_profile: str | None = None,
    ) -> None:
        import openai

        if prompt_profile is not None:
            profile_for(model, prompt_profile)  # an unknown name fails here, not mid-ingest
        self.prompt_profile = prompt_profile
        if json_mode is not None and json_mode not in JSON_MODES:
            raise ValueError(f"json_mode must be one of {', '.join(JSON_MODES)}, got {json_mode!r}")
        if base_url is not None:
            _check_base_url(base_url)
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            # Local servers (vLLM, Ollama, llama.cpp) accept any key; the client insists on one.
            api_key=api_key or ("not-needed" if base_url else None),
            max_retries=max_retries,
            timeout=timeout,
            http_client=http_client,
        )
        # While probing, a refusal must cost one round trip (llama-cpp-python's is a 500, which
        # the client would retry): the first try goes alone, its retries after it (if any).
        self._probe_client = self._client.with_options(max_retries=0)
        self._rest_client = (
            self._client.with_options(max_retries=max_retries - 1) if max_retries > 0 else None
        )
        self.max_concurrency = max_concurrency
        self._slots = Slots(max_concurrency)
        self._probing = asyncio.Lock()
        self._modes: dict[tuple[str, str], JsonMode] = {}
        if json_mode is not None:
            self._modes[self._endpoint] = json_mode

    @property
    def _endpoint(self) -> tuple[str, str]:
        return str(self._client.base_url), self.model

    @property
    def json_mode(self) -> JsonMode | None:
        """The reply format this endpoint accepted (None until the first request)."""
        return self._modes.get(self._endpoint)

    async def _complete(
        self, messages: list[Message], schema: type[BaseModel], name: str
    ) -> Completion:
        async with self._slots.take(urgent=_URGENT.get()):
            mode = self.json_mode
            if mode is not None:
                try:
                    return await self._send(self._client, mode, messages, schema, name)
                except _FormatRefused:  # the server behind the URL changed: find out again
                    log.warning(
                        "LLM endpoint %s now refuses %s; probing again", self._endpoint[0], mode
                    )
                    self._modes.pop(self._endpoint, None)
            async with self._probing:  # one request finds the mode; the others then use it
                if (mode := self.json_mode) is not None:
                    return await self._send(self._client, mode, messages, schema, name)
                return await self._probe(messages, schema, name)

    async def _probe(
        self, messages: list[Message], schema: type[BaseModel], name: str
    ) -> Completion:
        refusals: list[str] = []
        for mode in JSON_MODES:
            try:
                try:
                    reply = await self._send(self._probe_client, mode, messages, schema, name)
                except LLMUnavailableError:  # transient, not a refusal: the remaining retries
                    if self._rest_client is None:
                        raise
                    await asyncio.sleep(PROBE_RETRY_DELAY)
                    reply = await self._send(self._rest_client, mode, messages, schema, name)
            except _FormatRefused as exc:
                refusals.append(f"{mode}: {exc}")
                log.info(
                    "LLM endpoint %s refused %s; trying the next reply format",
                    self._endpoint[0],
                    mode,
                )
                continue
            self._modes[self._endpoint] = mode
            return reply
        raise LLMError("LLM endpoint refused every structured reply format: " + "; ".join(refusals))

    async def _send(
        self,
        client: Any,
        mode: JsonMode,
        messages: list[Message],
        schema: type[BaseModel],
        name: str,
    ) -> Completion:
        import openai

        extra: dict[str, Any] = {}
        if self.max_tokens is not None:
            extra["max_tokens"] = self.max_tokens
        if (response_format := _response_format(mode, schema, name)) is not None:
            extra["response_format"] = response_format
        if mode in ("json_object", "prompt"):
            messages = _with_schema_prompt(messages, schema)
        try:
            response = await client.chat.completions.create(
                model=self.model, messages=messages, temperature=self.temperature, **extra
            )
        except openai.APIStatusError as exc:
            detail = f"{exc.message} {exc.body}"
            if exc.status_code in (400, 422, 500) and _FORMAT_REFUSAL.search(detail):
                raise _FormatRefused(mode, exc.message[:300]) from exc
            if isinstance(exc, openai.RateLimitError | openai.InternalServerError):
                raise LLMUnavailableError(f"LLM endpoint failed after retries: {exc}") from exc
            raise LLMError(
                f"LLM endpoint refused the request ({exc.status_code}): {exc.message}"
            ) from exc
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise LLMUnavailableError(f"LLM endpoint failed after retries: {exc}") from exc
        usage = response.usage
        choice = response.choices[0] if response.choices else None
        return Completion(
            (choice.message.content or "") if choice else "",
            usage.prompt_tokens if usage else 0,
            usage.completion_tokens if usage else 0,
            cut=choice is not None and choice.finish_reason == "length",
        )


async def served_models(base_url: str, api_key: str | None = None) -> list[str]:
    """The model names an OpenAI-compatible endpoint lists (`GET /models`), for choosing
    the prompt profile by the name the server itself gives."""
    import openai

    _check_base_url(base_url)
    client = openai.AsyncOpenAI(
        base_url=base_url, api_key=api_key or "not-needed", max_retries=1, timeout=30.0
    )
    try:
        page = await client.models.list()
    except openai.APIStatusError as exc:
        raise LLMError(f"{base_url}: listing models failed ({exc.status_code})") from exc
    except (openai.APIConnectionError, openai.APITimeoutError) as exc:
        raise LLMUnavailableError(f"{base_url}: {exc}") from exc
    finally:
        await client.close()
    return [m.id for m in page.data]


Reply = str | Callable[[list[Message]], str]


class ScriptedLLM(StructuredLLM):
    """Canned replies, in order, through the same cleaning and validation as the real client.

    Token counts are estimated (4 characters a token) so budgets can be measured offline.
    """

    def __init__(
        self,
        replies: Sequence[Reply],
        model: str = "scripted",
        *,
        max_concurrency: int = 4,
        prompt_profile: str | None = None,
    ) -> None:
        if prompt_profile is not None:
            profile_for(model, prompt_profile)
        self.model = model
        self.prompt_profile = prompt_profile
        self.max_concurrency = max_concurrency
        self._replies = list(replies)
        self.requests: list[list[Message]] = []

    async def _complete(
        self, messages: list[Message], schema: type[BaseModel], name: str
    ) -> tuple[str, int, int]:
        if not self._replies:
            raise LLMUnavailableError("scripted LLM has no reply left")
        self.requests.append(list(messages))
        reply = self._replies.pop(0)
        text = reply(messages) if callable(reply) else reply
        prompt = sum(len(m["content"]) for m in messages)
        return text, max(1, prompt // 4), max(1, len(text) // 4)
