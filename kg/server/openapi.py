"""The OpenAPI document: each operation lists the statuses it can answer and no other, its
operationId is its route function's name (`add_episode`, `list_facts`: stable across
versions of FastAPI), and every error is the `Problem` schema."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from kg.server.models import Problem
from kg.server.problems import PROBLEM

WHY: dict[int, str] = {
    400: "The body is not JSON.",
    401: "No API key, or an invalid or revoked one.",
    403: "The key's role or channel does not allow this, or a cross-site write (Origin).",
    404: "Not found in this key's group.",
    408: "The request body did not arrive in time (`kg serve --body-timeout`).",
    413: "Request body too large (`kg serve --max-body`).",
    421: "A Host this server does not answer to (`kg serve --allowed-host`).",
    422: "Invalid input: `detail` names the problem, `errors` each invalid input.",
    429: "This key's requests in flight or its rate are over its limit; see Retry-After.",
    500: "Internal error (no traceback is ever sent).",
    502: "The LLM step failed; the episode is recorded as failed (retryable).",
    503: "The store is unreachable, or the server is not ready or shutting down.",
}

# Every request can meet the Host guard, a query parameter the route does not declare, and
# an internal error; a keyed one also the key check, the key's limits and the store.
ANY = (421, 422, 500)
KEYED = (401, 429, 503)
WRITE = (403,)  # any non-GET: the cross-site (Origin) guard, and the roles
BODY = (400, 408, 413)


def problems(*codes: int, body: bool = False, write: bool = False) -> dict[int | str, Any]:
    """The `responses` of a keyed /v1 operation: the statuses every keyed request can meet,
    those of a body or a write when it has one, and `codes`, its own."""
    found = set(ANY) | set(KEYED) | set(codes)
    found |= set(BODY) if body else set()
    found |= set(WRITE) if write or body else set()
    return unkeyed(*found)


def unkeyed(*codes: int) -> dict[int | str, Any]:
    """The problem responses for `codes` (plus those of ANY)."""
    return {
        code: {
            "description": WHY[code],
            "content": {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for code in sorted(set(codes) | set(ANY))
    }


def operation_id(route: APIRoute) -> str:
    return route.name


def build(app: FastAPI) -> dict[str, Any]:
    """The document, built once: `Problem` in place of FastAPI's validation-error schemas
    (FastAPI adds a 422 of its own only to a route that declares none; each of ours does)."""
    if app.openapi_schema is None:
        spec = get_openapi(
            title=app.title, version=app.version, summary=app.summary, routes=app.routes
        )
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        schemas["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schemas["Problem"].pop("$defs", {}))
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        for path, ops in spec.get("paths", {}).items():
            for op in ops.values():
                if path == "/metrics":
                    op["security"] = [{}, {"ApiKey": []}]  # the token is optional
        app.openapi_schema = spec
    return app.openapi_schema
