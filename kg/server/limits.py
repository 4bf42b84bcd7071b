"""Per-key limits, so one tenant cannot take the server from the rest: how many of a key's
requests run at once, how many may wait for their turn, and how fast it may send them.

The server is one event loop: a key with eight requests running gets eight times the CPU of
a key with one, whatever they cost. So a key runs at most `concurrency` requests at once,
of which at most `search_concurrency` searches, contexts or MCP calls (they cost tens of
times what a lookup does); the next ones wait their turn (costing nothing while they wait),
up to `queue` of them. The rate is a token bucket: `burst` tokens at once, refilled at
`rate` a second; a request takes one, a search, context or MCP call `search_cost`. A
request the bucket cannot pay for is not refused at once but delayed until it can (a
client that sends too fast is slowed to the rate, and one that ignores Retry-After cannot
spin on cheap refusals), unless that takes more than `max_delay`: then, and when the
queue is full, the answer is 429 with `Retry-After`.

Counted per authenticated key (after `Authenticate`): a request with an invalid key is
refused with a 401 before it costs more than a key lookup, and a key's id (which is public)
cannot spend another key's allowance. A key whose allowance is spent is refused before its
key is even looked up (`SpentKeys`), so a client that ignores Retry-After costs little.
Refusals come before the request's body is read or any route runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from kg.server.auth import bearer, keyed, principal
from kg.server.keys import KEY_RE, Principal
from kg.server.problems import problem

SEARCHES = frozenset({"/v1/search", "/v1/context", "/mcp"})  # the paths that cost more


@dataclass(frozen=True)
class KeyLimits:
    concurrency: int = 4  # a key's requests running at once; 0: no limit
    search_concurrency: int = 1  # of which searches, contexts and MCP calls; 0: no limit
    queue: int = 32  # a key's requests waiting for their turn; more are refused
    rate: float = 20.0  # tokens a second, sustained, per key; 0: no limit
    burst: int = 40  # tokens a key may spend at once after a quiet spell
    search_cost: float = 5.0  # tokens a search, context or MCP call takes (others: 1)
    max_delay: float = 2.0  # seconds a request may be held back for the rate; more: 429

    def cost(self, path: str) -> float:
        return min(float(self.burst), self.search_cost) if path in SEARCHES else 1.0


@dataclass
class _Usage:
    tokens: float
    stamp: float
    running: asyncio.Semaphore | None
    searching: asyncio.Semaphore | None
    waiting: int = 0
    in_flight: int = 0


class Limiter:
    """The per-key allowances of one server, made for a key when it first authenticates
    (so only real keys ever have one)."""

    def __init__(self, limits: KeyLimits) -> None:
        self.limits = limits
        self.usage: dict[str, _Usage] = {}

    def of(self, key_id: str) -> _Usage:
        lim = self.limits
        if key_id not in self.usage:
            self.usage[key_id] = _Usage(
                tokens=float(lim.burst),
                stamp=time.monotonic(),
                running=asyncio.Semaphore(lim.concurrency) if lim.concurrency else None,
                searching=(
                    asyncio.Semaphore(lim.search_concurrency) if lim.search_concurrency else None
                ),
            )
        return self.usage[key_id]

    def totals(self) -> tuple[int, int]:
        """Requests running and waiting, summed over every key."""
        uses = list(self.usage.values())
        return sum(u.in_flight for u in uses), sum(u.waiting for u in uses)

    def refusal(self, use: _Usage, path: str, *, take: bool) -> ASGIApp | float:
        """The 429 for a request to `path`, or the seconds it is to be held back for the
        rate (with `take`, its tokens are spent: the balance may go below zero, by at most
        `max_delay` seconds of rate, and the request waits until it is repaid)."""
        lim, now = self.limits, time.monotonic()
        cost = lim.cost(path) if lim.rate else 0.0
        if lim.rate:
            use.tokens = min(float(lim.burst), use.tokens + (now - use.stamp) * lim.rate)
            use.stamp = now
        held = use.tokens < cost or any(s.locked() for s in self._slots(use, path))
        if held and use.waiting >= lim.queue:
            detail = (
                f"this key has {use.in_flight} requests in flight and {use.waiting} waiting, "
                "its limit; retry when one has finished"
            )
            return _too_many(detail, 1.0)
        if not lim.rate:
            return 0.0
        delay = (cost - use.tokens) / lim.rate
        if delay > lim.max_delay:
            detail = (
                f"this key sent more than {lim.rate:g} requests a second (burst "
                f"{lim.burst}; a search, context or MCP call counts {lim.search_cost:g}); "
                "retry after the Retry-After seconds"
            )
            return _too_many(detail, delay - lim.max_delay)
        if take:
            use.tokens -= cost
        return max(0.0, delay)

    def _slots(self, use: _Usage, path: str) -> list[asyncio.Semaphore]:
        # The search slot first: a search waiting for it holds no slot another request needs.
        return [s for s in (use.searching if path in SEARCHES else None, use.running) if s]

    @contextlib.asynccontextmanager
    async def turn(self, use: _Usage, path: str, delay: float) -> AsyncIterator[None]:
        """Wait `delay` (the rate), then for a slot of this key (and a search slot, for a
        search); run; give the slots back."""
        slots = self._slots(use, path)
        use.waiting += 1
        held: list[asyncio.Semaphore] = []
        try:
            if delay > 0:
                await asyncio.sleep(delay)
            for s in slots:
                await s.acquire()
                held.append(s)
        except BaseException:
            for s in held:
                s.release()
            raise
        finally:
            use.waiting -= 1
        use.in_flight += 1
        try:
            yield
        finally:
            use.in_flight -= 1
            for s in held:
                s.release()


def _too_many(detail: str, wait: float) -> ASGIApp:
    headers = {"Retry-After": str(max(1, math.ceil(wait)))}
    return problem(429, "Too many requests", detail, headers=headers)


class SpentKeys:
    """Pure ASGI, in front of `Authenticate`: a request whose key id has already spent its
    allowance is refused without a store read. Nothing is counted here, so a forged key
    carrying another key's id cannot spend that key's allowance."""

    def __init__(self, app: ASGIApp, limiter: Limiter) -> None:
        self.app = app
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and keyed(scope["path"]):
            m = KEY_RE.match(bearer(scope) or "")
            use = self.limiter.usage.get(m.group(1)) if m else None
            refused = self.limiter.refusal(use, scope["path"], take=False) if use else None
            if refused is not None and not isinstance(refused, float):
                scope.setdefault("state", {})["problem"] = "rate_limited"
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


class PerKey:
    """Pure ASGI, behind `Authenticate`: every request made with a valid key is counted
    against its allowance and waits for its turn, or is refused."""

    def __init__(self, app: ASGIApp, limiter: Limiter) -> None:
        self.app = app
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        who = principal(scope) if scope["type"] == "http" else None
        if not isinstance(who, Principal):
            await self.app(scope, receive, send)
            return
        use = self.limiter.of(who.key_id)
        delay = self.limiter.refusal(use, scope["path"], take=True)
        if not isinstance(delay, float):
            scope.setdefault("state", {})["problem"] = "rate_limited"
            await delay(scope, receive, send)
            return
        async with self.limiter.turn(use, scope["path"], delay):
            await self.app(scope, receive, send)
