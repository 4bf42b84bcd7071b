"""graphiti-core against an OpenAI-compatible endpoint, with its LLM calls and tokens counted.

Shared by the benchmarks that run kg and Graphiti side by side on the same server and store
(benchmarks/pipelined_ingest.py, benchmarks/local_llm_background.py). Graphiti's telemetry is
off; its cross-encoder is never called by `add_episode`, so a stub stands in.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("GRAPHITI_TELEMETRY_ENABLED", "false")
os.environ.setdefault("OPENAI_API_KEY", "unused")

import httpx
from graphiti_core import Graphiti
from graphiti_core.cross_encoder.client import CrossEncoderClient
from graphiti_core.driver.falkordb_driver import FalkorDriver
from graphiti_core.llm_client.config import LLMConfig
from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient
from openai import AsyncOpenAI


class NoRerank(CrossEncoderClient):
    async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
        return [(p, 1.0) for p in passages]


@dataclass(frozen=True)
class Call:
    """One answered chat completion: its usage, how long it took, why the reply ended."""

    prompt_tokens: int
    completion_tokens: int
    seconds: float
    finish_reason: str


@dataclass
class Counts:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: int = 0
    answered: list[Call] = field(default_factory=list)


def counting_client(counts: Counts, timeout: float) -> httpx.AsyncClient:
    """An httpx client that counts chat completions and their usage as they come back."""

    async def on_request(request: httpx.Request) -> None:
        request.extensions["sent_at"] = time.perf_counter()

    async def on_response(response: httpx.Response) -> None:
        if not response.request.url.path.endswith("/chat/completions"):
            return
        counts.calls += 1
        await response.aread()
        seconds = time.perf_counter() - response.request.extensions.get("sent_at", 0.0)
        if response.status_code != 200:
            counts.errors += 1
            return
        body: dict[str, Any] = response.json() or {}
        usage: dict[str, Any] = body.get("usage") or {}
        prompt, completion = (
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
        )
        counts.prompt_tokens += prompt
        counts.completion_tokens += completion
        finish = str(((body.get("choices") or [{}])[0] or {}).get("finish_reason"))
        counts.answered.append(Call(prompt, completion, seconds, finish))

    return httpx.AsyncClient(
        timeout=timeout,
        event_hooks={"request": [on_request], "response": [on_response]},
        limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
    )


def graphiti(
    falkordb_client: Any,
    database: str,
    *,
    base_url: str,
    model: str,
    embedder: Any,
    counts: Counts,
    timeout: float = 300.0,
    max_tokens: int = 16384,
    json_object: bool = False,
    max_coroutines: int | None = None,
) -> Graphiti:
    """A Graphiti on `database` of an existing FalkorDB client, its LLM at `base_url`.

    `json_object`: Graphiti's own fallback for servers without `json_schema` (the schema goes
    in the prompt), which llama-cpp-python's server needs.
    """
    openai = AsyncOpenAI(
        base_url=base_url,
        api_key="unused",
        max_retries=2,
        http_client=counting_client(counts, timeout),
    )
    llm = OpenAIGenericClient(
        LLMConfig(api_key="unused", model=model, small_model=model, base_url=base_url),
        client=openai,
        max_tokens=max_tokens,
        structured_output_mode="json_object" if json_object else "json_schema",
    )
    driver = FalkorDriver(falkor_db=falkordb_client, database=database)
    return Graphiti(
        graph_driver=driver,
        llm_client=llm,
        embedder=embedder,
        cross_encoder=NoRerank(),
        max_coroutines=max_coroutines,
    )
