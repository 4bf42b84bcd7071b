"""The memory inspector: a static front end served at `/`, shipped in the package.

It uses only the HTTP API (with the key the user pastes, sent as a bearer header); nothing
here reads the store. The pages load no script, style or font from anywhere else, which the
Content-Security-Policy also enforces in the browser.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATIC = Path(__file__).parent / "static"
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


class Hardened:
    """Adds the pages' security headers to every answer of the wrapped static app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, sending)


router = APIRouter(include_in_schema=False)


@router.get("/")
async def index() -> FileResponse:
    """The inspector's page (no key needed: it holds no data; every data request the page
    makes carries the user's key)."""
    return FileResponse(STATIC / "index.html", headers={**HEADERS, "Cache-Control": "no-store"})


def mount_inspector(app: FastAPI) -> None:
    """`/` is the inspector's page, `/ui/...` its scripts and styles."""
    app.include_router(router)
    app.mount("/ui", Hardened(StaticFiles(directory=STATIC)), name="ui")
