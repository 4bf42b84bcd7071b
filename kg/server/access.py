"""The access log: one line per request, saying which route answered, never what was asked.

uvicorn's own access line holds the path and query string as sent (`GET /v1/history?subject=
Alice`), so a name would outlive its erasure in every log an operator keeps. This line holds
the route's template (`/v1/facts/{fact_id}/why`: no id) and each query value as a salted
hash (`?subject=~3fa2c1d0`): equal within one server run, so requests can still be told
apart and followed, but the salt is drawn at start and never written anywhere, so after a
restart no value can be recovered or matched, not even by hashing a guessed name. A path no
route matches is logged as `unmatched`. Request bodies are never logged.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import time
from collections.abc import Sequence
from urllib.parse import parse_qsl

from starlette.routing import BaseRoute, Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("kg.access")
_PLAIN_NAME = re.compile(r"[a-z_]{1,32}")


def route_of(scope: Scope, routes: Sequence[BaseRoute]) -> str:
    """The template of the route that answers (or would answer) this request, never its
    path: `unmatched` when none does."""
    found = getattr(scope.get("route"), "path", None) or scope.get("state", {}).get("route")
    if isinstance(found, str):
        return found
    partial = None
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.NONE:
            continue
        path = str(getattr(route, "path", "")) + ("/{path}" if isinstance(route, Mount) else "")
        if match is Match.FULL:
            return path
        partial = partial or path  # the path matches, not the method (a 405)
    return partial or "unmatched"


class Salted:
    """Per-process salted hashes of what callers sent: stable within one run only."""

    def __init__(self) -> None:
        self.salt = secrets.token_bytes(16)

    def __call__(self, value: str) -> str:
        return "~" + hashlib.blake2b(value.encode(), key=self.salt, digest_size=4).hexdigest()

    def query(self, raw: bytes) -> str:
        """The query string with every value hashed (names too, unless plain words)."""
        if not raw:
            return ""
        pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True)
        shown = [
            f"{k if _PLAIN_NAME.fullmatch(k) else self(k)}={self(v) if v else ''}" for k, v in pairs
        ]
        return "?" + "&".join(shown) if shown else ""


class AccessLog:
    """Pure ASGI, outermost: logs every HTTP request once it has been answered, in
    uvicorn's access format (`kg serve` turns uvicorn's own access log off)."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.routes = routes
        self.hash = Salted()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        start = time.perf_counter()

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if log.isEnabledFor(logging.INFO):
                client = scope.get("client")
                route = route_of(scope, self.routes)
                ms = round((time.perf_counter() - start) * 1000, 1)
                log.info(
                    '%s - "%s %s HTTP/%s" %d',
                    f"{client[0]}:{client[1]}" if client else "-",
                    scope["method"],
                    route + self.hash.query(scope["query_string"]),
                    scope.get("http_version", "1.1"),
                    status,
                    # for --log-format json (kg.server.logs.JsonFormatter): no query values
                    extra={
                        "method": scope["method"],
                        "route": route,
                        "status": status,
                        "duration_ms": ms,
                    },
                )
