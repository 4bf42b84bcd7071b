"""OpenTelemetry spans around ingest and search (`kg.ingest`, `kg.ingest.bulk`,
`kg.search`), when the OpenTelemetry API is installed (the `otel` extra; `kg serve`'s
dependencies bring the API too): kg only emits spans, and they go nowhere until the
application installs a tracer provider (the SDK and an exporter) or hands one to
`set_provider`. Without the API every span is a no-op.

Attributes are ids, kinds and counts of what kg did: the group, the episode's source and
channel, facts added and closed, a search's recipe and hit counts. Never an episode's text,
a query or a subject name: a trace outlives an erasure as a log does.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

try:
    from opentelemetry import trace
except ImportError:  # pragma: no cover - the API comes with the serve and otel extras
    trace = None  # type: ignore[assignment]

P = ParamSpec("P")
R = TypeVar("R")
Attributes = dict[str, str | int | float | bool]
_provider: Any = None  # None: the process's global tracer provider


def set_provider(provider: Any) -> None:
    """Send kg's spans to this tracer provider (None: back to the global one)."""
    global _provider
    _provider = provider


@contextmanager
def span(name: str, attributes: Attributes) -> Iterator[Any]:
    """A span named `name` around the block, current while it runs; None without the API.
    An exception leaving the block marks the span as an error with the exception's class
    (`error.type`), not its message, which may quote a name."""
    if trace is None:
        yield None
        return
    tracer = trace.get_tracer("kg", tracer_provider=_provider)
    with tracer.start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except BaseException as exc:
            kind = type(exc).__name__
            current.set_attribute("error.type", kind)
            current.set_status(trace.Status(trace.StatusCode.ERROR, kind))
            raise


def traced(
    name: str,
    before: Callable[..., Attributes],
    after: Callable[[Any], Attributes] | None = None,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """An async method in a span: `before(*args, **kwargs)` gives its first attributes,
    `after(result)` those known once it has returned."""

    def wrap(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def run(*args: P.args, **kwargs: P.kwargs) -> R:
            with span(name, before(*args, **kwargs)) as current:
                result = await fn(*args, **kwargs)
                if current is not None and after is not None:
                    current.set_attributes(after(result))
                return result

        return run

    return wrap
