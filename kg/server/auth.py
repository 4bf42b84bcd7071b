"""Who is calling, decided once per request, in front of the routes: `authorized` is the one
check of a key, for the HTTP API's `caller` dependency and the MCP door alike; the per-key
limits read the principal `Authenticate` leaves in the scope.

Only /v1 and /mcp take keys; a bearer credential elsewhere (the metrics token) is not a key.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from kg.errors import KGError
from kg.server.errors import UnauthorizedError
from kg.server.keys import Principal, authenticate
from kg.server.service import Memory

AUTH = "kg_auth"  # in the scope's state: a Principal, None (a key that is not one), a KGError
GROUP = "kg_group"  # the authenticated group, for Observe's per-group metrics


def keyed(path: str) -> bool:
    return path.startswith("/v1/") or path == "/mcp"


def bearer(scope: Scope) -> str | None:
    """The bearer credential of the request, if it sent one."""
    scheme, _, credential = Headers(scope=scope).get("authorization", "").partition(" ")
    credential = credential.strip()
    return credential if scheme.lower() == "bearer" and credential else None


class Authenticate:
    """Pure ASGI: looks the request's key up (once) and leaves the outcome in its state."""

    def __init__(self, app: ASGIApp, memory: Callable[[], Memory]) -> None:
        self.app = app
        self.memory = memory

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and keyed(scope["path"]):
            key = bearer(scope)
            if key is not None:
                state = scope.setdefault("state", {})
                found: Principal | KGError | None
                try:
                    found = await authenticate(self.memory().kg.store, key)
                except KGError as exc:  # the store is down, or the server not ready
                    found = exc
                state[AUTH] = found
                if isinstance(found, Principal):
                    state[GROUP] = found.group_id
        await self.app(scope, receive, send)


def principal(scope: Scope) -> Principal | KGError | None:
    """What `Authenticate` found: None when no key was sent or the key is not valid."""
    found = scope.get("state", {}).get(AUTH)
    return found if isinstance(found, Principal | KGError) else None


def authorized(scope: Scope) -> Principal:
    """The caller of a /v1 or /mcp request, or the error to answer: no key or a key that is
    not one (`UnauthorizedError`, 401), or why it could not be looked up (the store's error)."""
    found = principal(scope)
    if isinstance(found, KGError):
        raise found
    if found is None:
        if bearer(scope) is None:
            raise UnauthorizedError("no API key: send 'Authorization: Bearer <key>'")
        raise UnauthorizedError("invalid or revoked API key")
    return found
