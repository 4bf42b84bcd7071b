"""What every adapter needs of kg, whichever is wrapped: the embedded `KG` or an
`AsyncClient`. Both have `search`, `facts` and `add_episode` with the same arguments; their
answers differ (stored models vs the server's views), so they are read here as the shared
views (`HitView`, `FactView`) that HTTP, MCP and the CLI already speak.

Frameworks also call their adapters synchronously (a LangChain `invoke`, a LangGraph sync
node). kg is async, and a `KG` or `AsyncClient` belongs to the event loop that first used
it, so the sync calls of every adapter wrapping one memory run on one loop of that memory's
own, in a thread (`runner_for`): use a memory either from sync code (through adapters) or
from async code, not both.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Awaitable, Coroutine
from typing import Any, Protocol, TypeVar

from kg.schemas.graph import Fact
from kg.schemas.views import FactView, HitView, fact_view, hit_views

T = TypeVar("T")


class Memory(Protocol):
    """The calls the adapters make: `KG` and `kg.client.AsyncClient` both answer them."""

    def search(self, query: str, **options: Any) -> Awaitable[Any]: ...

    def facts(self, **options: Any) -> Awaitable[Any]: ...

    def add_episode(self, **fields: Any) -> Awaitable[Any]: ...


def hits_of(answer: Any) -> list[HitView]:
    """A search answer as hits, best first: an `AsyncClient`'s `SearchAnswer` has them; a
    `KG`'s `SearchResults` is converted as the server converts it."""
    found = getattr(answer, "hits", None)
    if found is not None:
        return list(found)
    return hit_views(answer)


def fact_views(facts: list[Any]) -> list[FactView]:
    """`KG.facts` answers stored `Fact`s, `AsyncClient.facts` `FactView`s: views either way."""
    return [fact_view(f) if isinstance(f, Fact) else f for f in facts]


class Runner:
    """One event loop in a daemon thread, for an adapter's sync calls: the wrapped memory is
    only ever used on this loop, however many threads call the adapter."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="kg-adapter", daemon=True).start()
                self._loop = loop
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._started()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise RuntimeError("a kg adapter's sync method was called on its own loop")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()


_RUNNERS: weakref.WeakKeyDictionary[Any, Runner] = weakref.WeakKeyDictionary()
_RUNNERS_LOCK = threading.Lock()


def runner_for(memory: Any) -> Runner:
    """The one `Runner` of `memory`: two adapters over one client share its loop."""
    with _RUNNERS_LOCK:
        found = _RUNNERS.get(memory)
        if found is None:
            found = _RUNNERS[memory] = Runner()
        return found
