"""What every /v1 route depends on: the caller (its key checked by `kg.server.auth.authorized`,
the same function the MCP door calls), the server's one `Memory`, and the refusal of query
parameters a route does not declare."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from kg.errors import InputError
from kg.server.auth import authorized
from kg.server.models import deprecated_names
from kg.server.pages import MAX_CURSOR, MAX_PAGE
from kg.server.service import Memory, Scoped, ShuttingDownError

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key from `kg keys create`; it decides the group and the role.",
)


def memory_of(request: Request) -> Memory:
    """The server's KG and its writes: set by the lifespan, gone once shutdown began."""
    found = getattr(request.app.state, "memory", None)
    if not isinstance(found, Memory):
        raise ShuttingDownError("the server is not ready")
    return found


async def caller(
    request: Request, cred: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> Scoped:
    """The key's scope: every /v1 route depends on it (`cred` puts the key in the spec;
    `authorized` decides)."""
    return memory_of(request).scoped(authorized(request.scope))


Caller = Annotated[Scoped, Depends(caller)]
PageLimit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="Items in a page.")]
Cursor = Annotated[
    str | None,
    Query(max_length=MAX_CURSOR, description="A previous page's `next_cursor`; none: the first."),
]


def known_query(request: Request) -> None:
    """Refuse query parameters a route does not declare (`?group_id=` above all): a typo or
    a smuggled field is a 422 naming it, never silently ignored. A deprecated name a query
    model still reads is known."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None or not request.query_params:
        return
    allowed: set[str] = set()
    params, todo = [], [dependant]
    while todo:
        d = todo.pop()
        params += d.query_params
        todo += d.dependencies
    for param in params:
        annotation = param.field_info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            allowed |= set(annotation.model_fields) | set(deprecated_names(annotation))
        else:
            allowed.add(param.alias)
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise InputError(f"{unknown[0]}: unknown query parameter")
