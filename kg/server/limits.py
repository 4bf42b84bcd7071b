"""Per-key limits: how many requests one key may have in flight, and how fast it may send
them, so one tenant cannot take the server from the rest.

Counted per authenticated key (after `Authenticate`): a request with an invalid key is
refused with a 401 before it costs more than a key lookup, and a key's id (which is public)
cannot be used to spend another key's allowance. Over a limit, the answer is 429 with
`Retry-After`, before the request's body is read or any route runs. The rate is a token
bucket: `burst` requests at once, refilled at `rate` a second.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from kg.server.auth import principal
from kg.server.keys import Principal
from kg.server.problems import problem


@dataclass(frozen=True)
class KeyLimits:
    concurrency: int = 8  # requests of one key in flight at once; 0: no limit
    rate: float = 20.0  # requests a second, sustained, per key; 0: no limit
    burst: int = 40  # requests a key may send at once after a quiet spell


@dataclass
class _Usage:
    tokens: float
    stamp: float
    in_flight: int = 0


class PerKey:
    """Pure ASGI: applies `KeyLimits` to every request made with a valid key."""

    def __init__(self, app: ASGIApp, limits: KeyLimits) -> None:
        self.app = app
        self.limits = limits
        self.usage: dict[str, _Usage] = {}

    def _wait(self, use: _Usage, now: float) -> float | None:
        """Seconds to wait before this request may run, or None: it may run now (and is
        counted)."""
        lim = self.limits
        if lim.concurrency and use.in_flight >= lim.concurrency:
            return 1.0
        if lim.rate:
            use.tokens = min(float(lim.burst), use.tokens + (now - use.stamp) * lim.rate)
            use.stamp = now
            if use.tokens < 1.0:
                return (1.0 - use.tokens) / lim.rate
            use.tokens -= 1.0
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        who = principal(scope) if scope["type"] == "http" else None
        if not isinstance(who, Principal):
            await self.app(scope, receive, send)
            return
        now = time.monotonic()
        use = self.usage.setdefault(who.key_id, _Usage(tokens=float(self.limits.burst), stamp=now))
        wait = self._wait(use, now)
        if wait is not None:
            scope.setdefault("state", {})["problem"] = "rate_limited"
            lim = self.limits
            detail = (
                f"this key has {use.in_flight} requests in flight, its limit; retry when one "
                "has finished"
                if lim.concurrency and use.in_flight >= lim.concurrency
                else f"this key sent more than {lim.rate:g} requests a second (burst "
                f"{lim.burst}); retry after the Retry-After seconds"
            )
            headers = {"Retry-After": str(max(1, math.ceil(wait)))}
            await problem(429, "Too many requests", detail, headers=headers)(scope, receive, send)
            return
        use.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            use.in_flight -= 1
