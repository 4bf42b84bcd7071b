"""How the HTTP API answers what goes wrong: RFC 9457 problem details, one status per kind
of error kg raises on purpose, `errors[]` naming each invalid input, 400 for a body that is
not JSON, and a bare 500 (no traceback, ever) for anything else."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from kg.errors import (
    DataDirLockedError,
    ExtractionError,
    InputError,
    KGError,
    NotFoundError,
    StoreUnavailableError,
)
from kg.server.keys import redact_keys
from kg.server.metrics import problem_kind
from kg.server.models import FieldError
from kg.server.problems import problem
from kg.server.service import ForbiddenError, ShuttingDownError

log = logging.getLogger("kg.server")
SHOWN = 5  # validation errors joined into `detail`; `errors` lists them all (up to MAX_ERRORS)
MAX_ERRORS = 50


class UnauthorizedError(KGError):
    """No key, or a key that is malformed, unknown or revoked (answered 401)."""


# (status, title) for each error kg raises on purpose; anything else is a 500 with no detail.
_STATUS: list[tuple[type[BaseException], int, str]] = [
    (UnauthorizedError, 401, "Unauthorized"),
    (ForbiddenError, 403, "Forbidden"),
    (NotFoundError, 404, "Not found"),
    (InputError, 422, "Invalid input"),
    (ExtractionError, 502, "Extraction failed"),
    (DataDirLockedError, 503, "Store unavailable"),
    (StoreUnavailableError, 503, "Store unavailable"),
    (ShuttingDownError, 503, "Shutting down"),
    (KGError, 500, "Store error"),
]


def status_of(exc: BaseException) -> tuple[int, str]:
    for cls, status, title in _STATUS:
        if isinstance(exc, cls):
            return status, title
    return 500, "Internal error"


def field_error(error: dict[str, Any]) -> FieldError:
    """One pydantic error as an `errors[]` entry: a JSON Pointer for the body, the parameter's
    name for the query or path."""
    loc = [str(p) for p in error.get("loc", ())]
    where, path = (loc[0], loc[1:]) if loc and loc[0] in ("body", "query", "path") else ("", loc)
    message = " ".join(str(error.get("msg", "invalid")).split())
    detail = redact_keys(message.removeprefix("Value error, "))
    dotted = ".".join(path)
    if where == "body":
        pointer = "#" + "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)
        return FieldError(pointer=pointer, field=dotted, detail=detail)
    if where in ("query", "path") and path:
        return FieldError(parameter=path[0], field=dotted, detail=detail)
    return FieldError(field=dotted, detail=detail)


def validation_problem(request: Request, exc: RequestValidationError) -> JSONResponse:
    """A body that is not JSON is a 400; invalid input a 422; both list `errors`."""
    raw = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in raw):
        e = next(e for e in raw if e.get("type") == "json_invalid")
        reason = (e.get("ctx") or {}).get("error", "not JSON")
        at = e.get("loc", ("body", 0))[-1]
        detail = f"the body is not valid JSON: {reason} (at character {at})"
        entry = FieldError(pointer="#", field="", detail=detail)
        return problem(400, "Bad request", detail, "bad_json", request, errors=[entry])
    entries = [field_error(e) for e in raw[:MAX_ERRORS]]
    parts = [f"{f.field or 'input'}: {f.detail}" for f in entries[:SHOWN]]
    more = f" (and {len(raw) - SHOWN} more)" if len(raw) > SHOWN else ""
    detail = "; ".join(parts) + more
    return problem(422, "Invalid input", detail, "validation", request, errors=entries)


async def _kg_error(request: Request, exc: Exception) -> JSONResponse:
    status, title = status_of(exc)
    if status >= 500:
        log.warning("%s %s: %s", request.method, request.url.path, exc)
    detail = " ".join(str(exc).split())
    kind = problem_kind(exc) if isinstance(exc, KGError) else "internal"
    return problem(status, title, detail, kind, request)


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return validation_problem(request, exc)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = exc.status_code
    return problem(code, str(exc.detail), str(exc.detail), f"http_{code}", request)


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    log.exception("%s %s failed", request.method, request.url.path)
    detail = "internal error; see the server log"
    return problem(500, "Internal error", detail, "internal", request)


def install(app: FastAPI) -> None:
    """The app's exception handlers: every error an answer in the same problem shape."""
    app.add_exception_handler(KGError, _kg_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal)
