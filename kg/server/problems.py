"""Errors as RFC 9457 problem details, for the routes and for the middleware in front of
them (which answer before any route runs); `detail` is the CLI's one-line message, API keys
masked."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from kg.server.keys import redact_keys
from kg.server.models import FieldError, Problem

PROBLEM = "application/problem+json"


def problem(
    status: int,
    title: str,
    detail: str,
    kind: str | None = None,
    request: Request | None = None,
    headers: dict[str, str] | None = None,
    errors: list[FieldError] | None = None,
) -> JSONResponse:
    """A problem response; `kind` names it in /metrics (left in the request's state)."""
    if request is not None and kind is not None:
        request.state.problem = kind
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="kg"'
    body = Problem(
        title=title, status=status, detail=redact_keys(detail), errors=errors
    ).model_dump(exclude_none=True)
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers or None)
