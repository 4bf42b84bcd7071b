"""Prometheus metrics: requests and tool calls (count, latency, errors) per route and tool,
and each group's ingest and query metrics (what `kg stats` shows), in the text format.

Labels are route templates and tool names, never paths, ids, keys or anything a caller sent:
cardinality stays fixed and no secret can reach a scrape.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kg.schemas.metrics import Metrics
from kg.schemas.store import StoreStats

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServerMetrics:
    """The process's request and tool metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "kg_http_requests", "HTTP requests.", ["route", "method", "status"], registry=r
        )
        self.latency = Histogram(
            "kg_http_request_seconds",
            "HTTP request latency.",
            ["route", "method"],
            buckets=BUCKETS,
            registry=r,
        )
        self.errors = Counter(
            "kg_http_errors",
            "HTTP requests answered with a problem (4xx or 5xx).",
            ["route", "method", "problem"],
            registry=r,
        )
        self.tool_calls = Counter("kg_mcp_tool_calls", "MCP tool calls.", ["tool"], registry=r)
        self.tool_latency = Histogram(
            "kg_mcp_tool_seconds", "MCP tool latency.", ["tool"], buckets=BUCKETS, registry=r
        )
        self.tool_errors = Counter(
            "kg_mcp_tool_errors",
            "MCP tool calls that returned an error.",
            ["tool", "problem"],
            registry=r,
        )
        self.writes_in_flight = 0

    def watch_keys(self, usage: Callable[[], tuple[int, int]]) -> None:
        """Export the keyed requests running and waiting for a slot (`usage()` gives both,
        summed over keys): a queue that grows is the first sign that keys need more slots
        or the server more room, and it has no per-key label, so no key id reaches a scrape."""
        self.registry.register(_KeyUsage(usage))

    def request(
        self, route: str, method: str, status: int, seconds: float, problem: str | None
    ) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)
        if problem is not None:
            self.errors.labels(route, method, problem).inc()

    @contextmanager
    def tool(self, name: str) -> Iterator[None]:
        """Time one tool call; an exception counts as an error of its problem kind."""
        start = time.perf_counter()
        self.tool_calls.labels(name).inc()
        try:
            yield
        except Exception as exc:
            self.tool_errors.labels(name, problem_kind(exc)).inc()
            raise
        finally:
            self.tool_latency.labels(name).observe(time.perf_counter() - start)

    def render(self, groups: Sequence[tuple[StoreStats, Metrics]] = ()) -> bytes:
        """The text exposition: this process's metrics, then the given groups' (if any)."""
        text = generate_latest(self.registry)
        if groups:
            per_group = CollectorRegistry(auto_describe=False)
            per_group.register(_GroupCollector(groups))
            text += generate_latest(per_group)
        return text


def problem_kind(exc: BaseException) -> str:
    """A short, fixed label for an error: its class name, snake-cased (no message text)."""
    name = type(exc).__name__
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")


class _KeyUsage(Collector):
    def __init__(self, usage: Callable[[], tuple[int, int]]) -> None:
        self.usage = usage

    def collect(self) -> Iterator[Metric]:
        running, waiting = self.usage()
        yield GaugeMetricFamily(
            "kg_key_requests_running", "Keyed requests holding a slot now.", value=running
        )
        yield GaugeMetricFamily(
            "kg_key_requests_waiting",
            "Keyed requests waiting for a slot of their key (or for its rate).",
            value=waiting,
        )


class _GroupCollector(Collector):
    def __init__(self, groups: Sequence[tuple[StoreStats, Metrics]]) -> None:
        self.groups = groups

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily("kg_group_size", "What a group holds.", labels=["group", "what"])
        ingest = CounterMetricFamily(
            "kg_group_ingest",
            "Ingest counters, summed over the group's episodes.",
            labels=["group", "counter"],
        )
        queries = CounterMetricFamily(
            "kg_group_queries",
            "Query counters (stored and not yet flushed).",
            labels=["group", "counter"],
        )
        hits = CounterMetricFamily(
            "kg_group_branch_hits", "Search hits per branch.", labels=["group", "branch"]
        )
        api_calls = CounterMetricFamily(
            "kg_group_api_calls",
            "Calls made with the group's keys, per route and MCP tool (stored and not yet "
            "flushed, every server process on the store).",
            labels=["group", "kind", "name"],
        )
        api_errors = CounterMetricFamily(
            "kg_group_api_errors",
            "Those answered with a problem or a tool error.",
            labels=["group", "kind", "name"],
        )
        for stats, m in self.groups:
            group = stats.group_id
            for what in (
                "episodes",
                "entities",
                "edge_versions",
                "current_facts",
                "contested_facts",
                "communities",
            ):
                g.add_metric([group, what], float(getattr(stats, what)))
            for name, value in m.ingest.model_dump().items():
                if isinstance(value, int | float):
                    ingest.add_metric([group, name], float(value))
            for name, value in m.queries.model_dump().items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    queries.add_metric([group, name], float(value))
            for branch, n in m.queries.branch_hits.items():
                hits.add_metric([group, branch], float(n))
            for kind, calls in (("route", m.api.routes), ("tool", m.api.tools)):
                for name, c in sorted(calls.items()):
                    api_calls.add_metric([group, kind, name], float(c.calls))
                    api_errors.add_metric([group, kind, name], float(c.errors))
        yield from (g, ingest, queries, hits, api_calls, api_errors)
