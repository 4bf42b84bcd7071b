"""The key and its group as a whole: whoami, stats and metrics, the audit log, what the
guard held back, the export; and the unkeyed /health and Prometheus /metrics."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials

from kg.facade import QuarantineEntry
from kg.schemas.metrics import Metrics
from kg.server.metrics import ServerMetrics
from kg.server.models import Health, LogEvent, LogPage, StatsResponse, Whoami
from kg.server.openapi import problems, unkeyed
from kg.server.pages import Page, mapped
from kg.server.routes.deps import Caller, Cursor, PageLimit, bearer, memory_of

VERSION = "0.1.0"
router = APIRouter(prefix="/v1")
service = APIRouter(tags=["service"])


@router.get("/whoami", tags=["keys"], responses=problems())
async def whoami(c: Caller) -> Whoami:
    """The group, role and channel this key is bound to."""
    p = c.principal
    return Whoami(group_id=p.group_id, role=p.role, key_id=p.key_id, channel=p.channel)


@router.get("/stats", tags=["admin"], responses=problems())
async def get_stats(c: Caller) -> StatsResponse:
    """Counts, and the ingest and query metrics (as `kg stats`)."""
    return await c.stats()


@router.get("/metrics", tags=["admin"], responses=problems())
async def get_metrics(c: Caller) -> Metrics:
    """The group's ingest and query metrics."""
    return await c.metrics()


@router.get("/log", tags=["admin"], responses=problems())
async def list_log(c: Caller, q: Annotated[LogPage, Query()]) -> Page[LogEvent]:
    """The audit trail, newest first: rollbacks and erasures (with their counts) and
    closures of facts (with their sentence)."""
    page = await c.log_page(closures=q.closures, limit=q.limit, cursor=q.cursor)
    return mapped(page, LogEvent.of)


@router.get("/quarantine", tags=["admin"], responses=problems())
async def list_quarantine(
    c: Caller, limit: PageLimit = 50, cursor: Cursor = None
) -> Page[QuarantineEntry]:
    """What the instruction guard held back from tools, documents and agents, newest
    first: `limit` episodes' worth a page, `next_cursor` for the next."""
    return await c.quarantine(limit=limit, cursor=cursor)


@router.get(
    "/export",
    tags=["admin"],
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/x-ndjson": {"schema": {"type": "string"}}}},
        **problems(403),
    },
)
async def export_group(c: Caller, embeddings: bool = True) -> StreamingResponse:
    """The group as JSON Lines, as `kg export` writes it (admin)."""
    lines = c.export(embeddings=embeddings)
    first = await anext(lines, None)  # errors before the first line are still problems

    async def body() -> AsyncIterator[str]:
        if first is not None:
            yield first + "\n"
            async for line in lines:
                yield line + "\n"

    return StreamingResponse(body(), media_type="application/x-ndjson")


@service.get("/health", responses=unkeyed(503))
async def health(request: Request) -> Health:
    """Liveness: the server is up and holds its store (no key needed)."""
    return Health(store=memory_of(request).kg.store.backend, version=VERSION)


@service.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **unkeyed(503)},
)
async def prometheus_metrics(
    request: Request,
    cred: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Response:
    """Prometheus text format: requests and MCP tool calls per route and tool. With the
    operator's metrics token (`kg serve --metrics-token`) as bearer, also each keyed
    group's size, ingest and query metrics (what `kg stats` shows)."""
    metrics: ServerMetrics = request.app.state.metrics
    token: str | None = request.app.state.metrics_token
    groups = []
    if token and cred is not None and hmac.compare_digest(cred.credentials, token):
        kg = memory_of(request).kg
        names = sorted({k.scope for k in await kg.store.keys() if k.revoked_at is None})
        for g in names:
            groups.append((await kg.stats(g), await kg.metrics(g)))
    return Response(metrics.render(groups), media_type="text/plain; version=0.0.4")
