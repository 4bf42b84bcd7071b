"""A request id on every HTTP request: the caller's `X-Request-Id` when it is well formed
(1-128 letters, digits and `._:-`, and not shaped like an API key), else a fresh one; echoed
in the answer's `X-Request-Id` and put on every log line written while the request runs
(`kg.server.logs`), so one request's lines can be found across the access log, warnings
and a proxy's log."""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar
from typing import Any

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kg.server.keys import redact_keys

HEADER = "x-request-id"
STATE = "request_id"  # in the scope's state
_WELL_FORMED = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
# The running request's state (its request id, and the principal once authenticated), for
# the log formatter: a contextvar, so each request's log lines read their own.
REQUEST_STATE: ContextVar[dict[str, Any] | None] = ContextVar("kg_request_state", default=None)


def request_id(given: str | None) -> str:
    """The caller's id if it is safe to log and echo, else a fresh one."""
    if given and _WELL_FORMED.fullmatch(given) and redact_keys(given) == given:
        return given
    return uuid.uuid4().hex


class RequestIds:
    """Pure ASGI, outermost: gives the request its id, echoes it, and exposes the request's
    state to the log formatter while the request runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        rid = state[STATE] = request_id(Headers(scope=scope).get(HEADER))

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", []))
                MutableHeaders(scope=message)[HEADER] = rid
            await send(message)

        token = REQUEST_STATE.set(state)
        try:
            await self.app(scope, receive, sending)
        finally:
            REQUEST_STATE.reset(token)
