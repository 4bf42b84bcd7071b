"""The server's RFC 9457 problems raised as kg's own exceptions, so code written against the
embedded `KG` catches the same classes from a server: 400/413/422 `InputError`, 404
`NotFoundError`, 502 `ExtractionError`, 503 `StoreUnavailableError`; and two the embedded
engine never raises, `AccessDeniedError` (401, 403) and `RateLimitedError` (429).

Each raised error carries the answer's `status` and `problem` (the body, a dict) as attributes.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from kg.errors import (
    ExtractionError,
    InputError,
    KGError,
    NotFoundError,
    StoreError,
    StoreUnavailableError,
)

__all__ = ["AccessDeniedError", "RateLimitedError", "ServerError", "problem_error"]


class AccessDeniedError(KGError, PermissionError):
    """401: no key, or a key that is unknown or revoked; 403: the key's role or channel does
    not allow the request (`status` says which)."""


class RateLimitedError(KGError):
    """429: the key sent faster than the server allows; retry after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ServerError(StoreError):
    """A 5xx the server gave no better name: the request may not have been carried out."""


_BY_STATUS: dict[int, type[KGError]] = {
    400: InputError,
    401: AccessDeniedError,
    403: AccessDeniedError,
    404: NotFoundError,
    405: InputError,
    413: InputError,
    415: InputError,
    422: InputError,
    502: ExtractionError,
    503: StoreUnavailableError,
}


def retry_after(response: httpx.Response) -> float:
    """The Retry-After header in seconds (an HTTP date is not sent by kg: 1 s then)."""
    try:
        return max(0.0, float(response.headers.get("retry-after", "1")))
    except ValueError:
        return 1.0


def _body(response: httpx.Response) -> dict[str, Any]:
    try:
        found = json.loads(response.content)
    except ValueError:
        found = None
    if isinstance(found, dict):
        return found
    text = response.text.strip()[:200] or response.reason_phrase
    return {"title": response.reason_phrase, "status": response.status_code, "detail": text}


def problem_error(response: httpx.Response) -> KGError:
    """The exception for an error answer: its class from the status, its message the
    problem's one-line `detail` (the message the embedded engine would have raised)."""
    problem = _body(response)
    status = response.status_code
    detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
    exc: KGError
    if status == 429:
        exc = RateLimitedError(detail, retry_after(response))
    else:
        exc = _BY_STATUS.get(status, ServerError if status >= 500 else InputError)(detail)
    exc.status = status  # type: ignore[attr-defined]
    exc.problem = problem  # type: ignore[attr-defined]
    return exc
