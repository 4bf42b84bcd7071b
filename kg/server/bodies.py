"""Request bodies, bounded in size and in time, before any route runs.

The body is read here, whole, then replayed to the route: one over `max_body` bytes is
refused with 413 as soon as it is known to be (from Content-Length, or while it arrives),
and one that has not fully arrived `body_seconds` after the request's headers (a trickled
upload holding a connection and a request slot) with 408, and the connection is closed.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kg.server.problems import problem


class BodyLimits:
    """Pure ASGI: size and read-time limits on every HTTP request body."""

    def __init__(self, app: ASGIApp, max_body: int, body_seconds: float) -> None:
        self.app = app
        self.max_body = max_body
        self.body_seconds = body_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        too_large = problem(
            413, "Request body too large", f"request body over {self.max_body} bytes"
        )
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            state["problem"] = "body_too_large"
            await too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.body_seconds):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    size += len(message.get("body", b""))
                    if size > self.max_body:
                        state["problem"] = "body_too_large"
                        await too_large(scope, receive, send)
                        return
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            state["problem"] = "body_timeout"
            detail = f"the request body did not arrive within {self.body_seconds:g} s"
            slow = problem(408, "Request timeout", detail, headers={"Connection": "close"})
            await slow(scope, receive, send)
            return
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
