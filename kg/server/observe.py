"""Every HTTP request counted and timed by route template (never by path) for /metrics, and,
made with a key, in its group's stored API metrics (`kg stats`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kg.server.access import route_of
from kg.server.auth import GROUP
from kg.server.metrics import ServerMetrics
from kg.server.problems import problem
from kg.server.service import Memory, ShuttingDownError


class Observe:
    """Pure ASGI: count and time every HTTP request by route template (never by path), for
    /metrics; a request made with a key also counts in its group's stored API metrics
    (`kg stats`)."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: ServerMetrics,
        routes: Sequence[BaseRoute],
        memory: Callable[[], Memory] | None = None,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes
        self.memory = memory

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        state = scope.setdefault("state", {})

        started = False

        async def sending(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            # uvicorn cancels what is still open when --graceful-timeout runs out (and logs a
            # traceback, answering 500). A write such a request started is shielded and
            # finishes before the store closes (Writes.drain): say so, as a 503.
            if started:
                raise
            state["problem"] = "shutting_down_error"
            detail = (
                "the server stopped before this request finished; a write it started is "
                "completed, not dropped (look it up before sending it again)"
            )
            await problem(503, "Shutting down", detail, "shutting_down_error")(
                scope, receive, sending
            )
        finally:
            route = route_of(scope, self.routes)
            kind = state.get("problem") or (f"http_{status}" if status >= 400 else None)
            seconds = time.perf_counter() - start
            self.metrics.request(route, scope["method"], status, seconds, kind)
            group = state.get(GROUP)
            if group is not None and self.memory is not None:
                with contextlib.suppress(ShuttingDownError):
                    self.memory().kg.record_call(
                        group, "route", f"{scope['method']} {route}", seconds, error=status >= 400
                    )
