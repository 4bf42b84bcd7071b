"""LLM clients for the write path: one interface, structured (JSON-schema) replies.

Small local models wrap JSON in `<think>` blocks and code fences, or drift from the schema.
So every reply is cleaned, validated against the pydantic model, and on failure asked for
once more with the validation error in the prompt, before `LLMOutputError` fails the
episode cleanly. Every call is recorded (model, tokens, latency, attempt), since kg promises
a budget of LLM calls per episode and reports what it spent.

`OpenAILLM` speaks to any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp) via
`base_url`; `ScriptedLLM` replays canned replies through the same validation path for tests.
"""

from __future__ import annotations

import abc
import asyncio
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kg.schemas.validation import validation_message

T = TypeVar("T", bound=BaseModel)
Message = dict[str, str]

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


class StructuredLLM(abc.ABC):
    """Validation and one corrective retry, shared by every client."""

    model: str

    @abc.abstractmethod
    async def _complete(
        self, messages: list[Message], schema: type[BaseModel], name: str
    ) -> tuple[str, int, int]:
        """One model call: (reply text, prompt tokens, completion tokens)."""

    async def structured(
        self, messages: Sequence[Message], schema: type[T], *, purpose: str, max_attempts: int = 2
    ) -> tuple[T, list[LLMCall]]:
        """Validated reply; `max_attempts` = 1 skips the corrective retry (budget spent)."""
        if max_attempts not in (1, 2):
            raise ValueError(f"max_attempts must be 1 or 2, got {max_attempts}")
        convo = list(messages)
        calls: list[LLMCall] = []
        raw = ""
        for attempt in range(1, max_attempts + 1):
            t0 = time.perf_counter()
            raw, prompt_tokens, completion_tokens = await self._complete(
                convo, schema, schema.__name__
            )
            latency = (time.perf_counter() - t0) * 1000
            try:
                value = schema.model_validate_json(clean_reply(raw))
                error = None
            except ValidationError as exc:
                value, error = None, validation_message(exc, limit=5)
            calls.append(
                LLMCall(purpose=purpose, model=self.model, attempt=attempt,
                        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                        latency_ms=round(latency, 2), valid=error is None)
            )  # fmt: skip
            if value is not None:
                return value, calls
            assert error is not None
            convo = [*list(messages), *_correction(raw, error)]
        raise LLMOutputError(
            f"{purpose}: the model's reply did not match {schema.__name__}"
            + (" after a corrective retry" if max_attempts > 1 else "")
            + f": {error}",
            raw,
            calls,
        )


class OpenAILLM(StructuredLLM):
    """Chat completions with `response_format` = JSON schema, on the official `openai` client.

    Retries with backoff on 429 and 5xx (honouring Retry-After) are the `openai` client's own;
    `max_concurrency` bounds requests in flight from this process.
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
    ) -> None:
        import openai

        self.model = model
        self.temperature = temperature
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            # Local servers (vLLM, Ollama, llama.cpp) accept any key; the client insists on one.
            api_key=api_key or ("not-needed" if base_url else None),
            max_retries=max_retries,
            timeout=timeout,
            http_client=http_client,
        )
        self._slots = asyncio.Semaphore(max_concurrency)

    async def _complete(
        self, messages: list[Message], schema: type[BaseModel], name: str
    ) -> tuple[str, int, int]:
        import openai

        response_format: Any = {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": schema.model_json_schema()},
        }
        async with self._slots:
            try:
                response = await self._client.chat.completions.create(
                    model=self.model,
                    messages=messages,  # type: ignore[arg-type]
                    response_format=response_format,
                    temperature=self.temperature,
                )
            except (openai.APIConnectionError, openai.RateLimitError,
                    openai.InternalServerError, openai.APITimeoutError) as exc:  # fmt: skip
                raise LLMUnavailableError(f"LLM endpoint failed after retries: {exc}") from exc
            except openai.APIStatusError as exc:
                raise LLMError(f"LLM endpoint refused the request ({exc.status_code}): "
                               f"{exc.message}") from exc  # fmt: skip
        usage = response.usage
        text = (response.choices[0].message.content or "") if response.choices else ""
        return (
            text,
            usage.prompt_tokens if usage else 0,
            usage.completion_tokens if usage else 0,
        )


Reply = str | Callable[[list[Message]], str]


class ScriptedLLM(StructuredLLM):
    """Canned replies, in order, through the same cleaning and validation as the real client.

    Token counts are estimated (4 characters a token) so budgets can be measured offline.
    """

    def __init__(self, replies: Sequence[Reply], model: str = "scripted") -> None:
        self.model = model
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
