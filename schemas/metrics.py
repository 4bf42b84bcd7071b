"""Observability: what ingest did per episode (stored on each episode) and what queries did
(aggregated in process, persisted per group when the KG closes)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

_KEY = re.compile(r"[a-z]+_[a-z0-9_]+")


class GraphCounters(BaseModel):
    """What ingesting an episode did to the graph, and its LLM calls: the counters an
    episode's `PlanSummary` reports and its stored metrics (`Counters`) keep."""

    llm_calls: int = 0
    facts_added: int = 0
    facts_reinforced: int = 0
    facts_closed: int = 0
    facts_contested: int = 0
    facts_merged: int = Field(
        default=0, description="Facts the resolution call found to restate a stored fact."
    )
    entities_added: int = 0
    entities_merged: int = Field(
        default=0, description="New names the resolution call found to be existing entities."
    )
    facts_quarantined: int = Field(
        default=0, description="Untrusted facts that read as instructions: kept for review only."
    )
    passages_quarantined: int = Field(
        default=0, description="Untrusted passages that read as instructions (withheld in context)."
    )


class Counters(GraphCounters):
    """What ingesting did and cost, flat for storage and sums: per episode, or over a group."""

    llm_tokens: int = Field(default=0, description="Prompt plus completion tokens.")
    facts_dropped: int = 0


class EpisodeMetrics(Counters):
    """Written on the Episodic node with the episode; summed by `IngestMetrics`."""

    facts_extracted: int | None = Field(
        default=None, description="LLM episodes: facts kept after vetting; None otherwise."
    )


class IngestMetrics(Counters):
    """Sums over a group's ingested episodes."""

    episodes: int = 0
    llm_episodes: int = Field(default=0, description="Episodes that went through extraction.")
    empty_extractions: int = Field(default=0, description="LLM episodes that kept no fact.")

    @property
    def empty_extraction_rate(self) -> float | None:
        return self.empty_extractions / self.llm_episodes if self.llm_episodes else None

    @property
    def llm_calls_per_episode(self) -> float | None:
        return self.llm_calls / self.llm_episodes if self.llm_episodes else None


class QueryMetrics(BaseModel):
    """Counters over searches and context renders. `branch_hits` is keyed 'scope_method'."""

    queries: int = 0
    zero_result_queries: int = 0
    branch_errors: int = 0
    latency_ms_total: float = 0.0
    branch_hits: dict[str, int] = Field(default_factory=dict)
    contexts: int = 0
    context_tokens: int = Field(default=0, description="Tokens injected into prompts, summed.")

    def merged(self, other: QueryMetrics) -> QueryMetrics:
        hits = dict(self.branch_hits)
        for k, v in other.branch_hits.items():
            hits[k] = hits.get(k, 0) + v
        return QueryMetrics(
            queries=self.queries + other.queries,
            zero_result_queries=self.zero_result_queries + other.zero_result_queries,
            branch_errors=self.branch_errors + other.branch_errors,
            latency_ms_total=self.latency_ms_total + other.latency_ms_total,
            branch_hits=hits,
            contexts=self.contexts + other.contexts,
            context_tokens=self.context_tokens + other.context_tokens,
        )

    @property
    def mean_latency_ms(self) -> float | None:
        return self.latency_ms_total / self.queries if self.queries else None

    @property
    def mean_context_tokens(self) -> float | None:
        return self.context_tokens / self.contexts if self.contexts else None

    @staticmethod
    def branch_key(scope: str, method: str) -> str | None:
        """'facts_bm25'; None for a name that could not be a stored property name."""
        key = f"{scope}_{method}"
        return key if valid_branch_key(key) else None


def valid_branch_key(key: str) -> bool:
    return _KEY.fullmatch(key) is not None


# What names an API call: an HTTP route template ('POST /v1/facts/{fact_id}/why', never a
# path with ids in it) or an MCP tool name ('search_memory'). Fixed sets, so fixed cardinality.
_ROUTE = re.compile(r"^(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) /[A-Za-z0-9_/{}.-]{0,200}$")
_TOOL = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
CallKind = Literal["route", "tool"]


def valid_call_name(kind: CallKind, name: str) -> bool:
    return (_ROUTE if kind == "route" else _TOOL).match(name) is not None


class CallStats(BaseModel):
    calls: int = 0
    errors: int = Field(
        default=0, description="Answered with a problem (HTTP 4xx/5xx) or a tool error."
    )
    latency_ms_total: float = 0.0

    def merged(self, other: CallStats) -> CallStats:
        return CallStats(
            calls=self.calls + other.calls,
            errors=self.errors + other.errors,
            latency_ms_total=self.latency_ms_total + other.latency_ms_total,
        )

    @property
    def mean_latency_ms(self) -> float | None:
        return self.latency_ms_total / self.calls if self.calls else None


class ApiMetrics(BaseModel):
    """Calls made with the group's credentials through `kg serve` (per HTTP route) and the
    MCP tools (per tool, `kg mcp` too): aggregated in process, flushed like `QueryMetrics`."""

    routes: dict[str, CallStats] = Field(default_factory=dict)
    tools: dict[str, CallStats] = Field(default_factory=dict)

    def merged(self, other: ApiMetrics) -> ApiMetrics:
        out = self.model_copy(deep=True)
        for kind in ("routes", "tools"):
            mine: dict[str, CallStats] = getattr(out, kind)
            for name, stats in getattr(other, kind).items():
                mine[name] = mine.get(name, CallStats()).merged(stats)
        return out

    def add(self, kind: CallKind, name: str, seconds: float, *, error: bool) -> None:
        calls = self.routes if kind == "route" else self.tools
        one = CallStats(calls=1, errors=int(error), latency_ms_total=seconds * 1000)
        calls[name] = calls.get(name, CallStats()).merged(one)

    @property
    def empty(self) -> bool:
        return not (self.routes or self.tools)


class QueueMetrics(BaseModel):
    """The group's background queue (kg.queue) as it stands."""

    queued: int = Field(default=0, description="Waiting for a worker (retries included).")
    processing: int = Field(default=0, description="Held by a worker's lease.")
    done: int = Field(default=0, description="Ingested through the queue.")
    failed: int = Field(default=0, description="Out of attempts, or failed in a waiting call.")
    oldest_waiting_s: float | None = Field(
        default=None, description="Age of the oldest episode queued or processing."
    )
    latency_p50_s: float | None = Field(
        default=None, description="Write-to-searchable: enqueue to facts written, median."
    )
    latency_p95_s: float | None = None
    latency_samples: int = Field(default=0, description="Recent completions the latency covers.")
    retries: int = Field(default=0, description="Claims beyond each episode's first.")
    failures_by_reason: dict[str, int] = Field(
        default_factory=dict, description="Failed attempts by reason (llm_output, ...)."
    )


class Metrics(BaseModel):
    group_id: str
    ingest: IngestMetrics
    queries: QueryMetrics
    api: ApiMetrics = Field(default_factory=ApiMetrics)
    queue: QueueMetrics = Field(default_factory=QueueMetrics)
