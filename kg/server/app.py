"""The HTTP API (FastAPI on uvicorn): one process, one KG, the group taken from the key.

Every `/v1` route authenticates a bearer key and works in that key's group only: another
group's ids are answered 404, exactly as ids that exist nowhere. Errors are RFC 9457
problem details whose `detail` is the CLI's one-line message; nothing answers a traceback.
Request bodies are bounded (`max_body`). The MCP server is mounted at `/mcp` (kg.server.mcp).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kg.erasure import ErasureReceipt
from kg.errors import (
    DataDirLockedError,
    ExtractionError,
    InputError,
    KGError,
    NotFoundError,
    StoreUnavailableError,
)
from kg.facade import KG, EpisodeResult, QuarantineEntry
from kg.queue import Worker, WorkerStats
from kg.retrieval import SearchResults
from kg.rollback import RollbackReport
from kg.schemas.graph import AuditEvent, EpisodicNode, Fact
from kg.schemas.metrics import Metrics
from kg.schemas.store import EntitySummary
from kg.server.access import AccessLog, route_of
from kg.server.auth import GROUP, Authenticate, principal
from kg.server.auth import bearer as bearer_of
from kg.server.bodies import BodyLimits
from kg.server.hosts import HostGuard, allowed_hosts
from kg.server.inspector import mount_inspector
from kg.server.keys import Principal
from kg.server.limits import KeyLimits, Limiter, PerKey, SpentKeys
from kg.server.mcp import PRINCIPAL, build_mcp, mcp_http_app
from kg.server.metrics import ServerMetrics, problem_kind
from kg.server.models import (
    AddEpisode,
    ContextRequest,
    ContextResponse,
    Correction,
    EraseEntityRequest,
    EraseGroupRequest,
    FactsQuery,
    Health,
    HistoryQuery,
    Problem,
    RollbackRequest,
    SearchRequest,
    StatsResponse,
    Whoami,
    WhyResponse,
)
from kg.server.pages import MAX_CURSOR, Page
from kg.server.problems import PROBLEM, problem
from kg.server.service import ForbiddenError, Memory, Scoped, ShuttingDownError

log = logging.getLogger("kg.server")
VERSION = "0.1.0"


class UnauthorizedError(KGError):
    """No key, or a key that is malformed, unknown or revoked (answered 401)."""


@dataclass
class ServeOptions:
    max_body: int = 1 << 20  # bytes of a request body
    body_seconds: float = 30.0  # for a request's body to arrive, from its headers
    metrics_token: str | None = None  # a scrape presenting it also gets per-group metrics
    flush_seconds: float = 30.0  # how often query metrics reach the store (kg stats)
    host: str = "127.0.0.1"  # the address bound: its Host is allowed (kg.server.hosts)
    allowed_hosts: tuple[str, ...] = ()  # more Host names to answer (--allowed-host)
    key_limits: KeyLimits = field(default_factory=KeyLimits)  # per key: in flight, rate
    worker: bool = True  # a background worker in the process, for episodes sent with wait=false
    # At shutdown the worker's extraction in flight gets this long, counted from
    # `begin_shutdown` (kg serve calls it at the signal and passes --graceful-timeout, the
    # open requests' budget too), else from the lifespan's shutdown.
    graceful_seconds: float = 30.0


class Background:
    """The server's queue worker: episodes sent with wait=false are written by it. Its stop
    is bounded by the graceful timeout (`Worker.stop_within`)."""

    def __init__(self, kg: KG, seconds: float) -> None:
        self.worker = Worker(kg)
        self.seconds = seconds
        self.running = asyncio.create_task(self.worker.run())
        self.stopping: asyncio.Task[WorkerStats] | None = None

    def stop(self) -> asyncio.Task[WorkerStats]:
        """Start stopping (once): no new claims from now, the graceful timeout runs."""
        if self.stopping is None:
            self.stopping = asyncio.create_task(self.worker.stop_within(self.running, self.seconds))
        return self.stopping


def begin_shutdown(app: FastAPI) -> None:
    """The server stops accepting requests: stop the background worker now, so that its
    stop runs in the same graceful timeout as the requests still open (uvicorn only runs
    the lifespan's shutdown after those)."""
    background = getattr(app.state, "background", None)
    if isinstance(background, Background):
        background.stop()


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


def _problem_doc(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


ERRORS: dict[int | str, dict[str, Any]] = {
    400: _problem_doc("The body could not be parsed (not UTF-8 JSON)."),
    401: _problem_doc("No API key, or an invalid or revoked one."),
    403: _problem_doc(
        "The key's role or channel does not allow this, or a cross-site write (Origin)."
    ),
    404: _problem_doc("Not found in this key's group."),
    408: _problem_doc("The request body did not arrive in time (`kg serve --body-timeout`)."),
    413: _problem_doc("Request body too large."),
    421: _problem_doc("A Host this server does not answer to (`kg serve --allowed-host`)."),
    422: _problem_doc("Invalid input; `detail` names the problem."),
    429: _problem_doc(
        "This key's requests in flight or its rate are over its limit; see Retry-After."
    ),
    500: _problem_doc("Internal error (no traceback is ever sent)."),
    502: _problem_doc("The LLM step failed; the episode is recorded as failed (retryable)."),
    503: _problem_doc("The store is unreachable, or the server is shutting down."),
}


class Observe:
    """Pure ASGI: count and time every HTTP request by route template (never by path), for
    /metrics; a request made with a key also counts in its group's stored API metrics
    (`kg stats`)."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: ServerMetrics,
        routes: Sequence[BaseRoute],
        memory: Callable[[], Memory] | None = None,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes
        self.memory = memory

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        state = scope.setdefault("state", {})

        started = False

        async def sending(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            # uvicorn cancels what is still open when --graceful-timeout runs out (and logs a
            # traceback, answering 500). A write such a request started is shielded and
            # finishes before the store closes (Writes.drain): say so, as a 503.
            if started:
                raise
            state["problem"] = "shutting_down_error"
            detail = (
                "the server stopped before this request finished; a write it started is "
                "completed, not dropped (look it up before sending it again)"
            )
            await problem(503, "Shutting down", detail, "shutting_down_error")(
                scope, receive, sending
            )
        finally:
            route = route_of(scope, self.routes)
            kind = state.get("problem") or (f"http_{status}" if status >= 400 else None)
            seconds = time.perf_counter() - start
            self.metrics.request(route, scope["method"], status, seconds, kind)
            group = state.get(GROUP)
            if group is not None and self.memory is not None:
                with contextlib.suppress(ShuttingDownError):
                    self.memory().kg.record_call(
                        group, "route", f"{scope['method']} {route}", seconds, error=status >= 400
                    )


bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key from `kg keys create`; it decides the group and the role.",
)


def _memory(request: Request) -> Memory:
    found = getattr(request.app.state, "memory", None)
    if not isinstance(found, Memory):
        raise ShuttingDownError("the server is not ready")
    return found


async def caller(
    request: Request, cred: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> Scoped:
    """The key's scope (looked up by kg.server.auth.Authenticate): every /v1 route
    depends on it."""
    if cred is None:
        raise UnauthorizedError("no API key: send 'Authorization: Bearer <key>'")
    found = principal(request.scope)
    if isinstance(found, KGError):
        raise found
    if found is None:
        raise UnauthorizedError("invalid or revoked API key")
    return _memory(request).scoped(found)


Caller = Annotated[Scoped, Depends(caller)]
PageLimit = Annotated[int, Query(ge=1, le=1000, description="Rows in a page.")]
Cursor = Annotated[
    str | None,
    Query(max_length=MAX_CURSOR, description="A previous page's `next_cursor`; none: the first."),
]


def known_query(request: Request) -> None:
    """Refuse query parameters a route does not declare (`?group_id=` above all): a typo or
    a smuggled field is a 422 naming it, never silently ignored."""
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
            allowed |= set(annotation.model_fields)
        else:
            allowed.add(param.alias)
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise InputError(f"{unknown[0]}: unknown query parameter")


def create_app(
    open_kg: Callable[[], Awaitable[KG]], options: ServeOptions | None = None
) -> FastAPI:
    """The whole server as an ASGI app; `open_kg` runs at startup, the KG closes at shutdown
    after every write in flight has finished."""
    opts = options or ServeOptions()
    metrics = ServerMetrics()
    holder: dict[str, Memory] = {}

    def memory() -> Memory:
        if "m" not in holder:
            raise ShuttingDownError("the server is not ready")
        return holder["m"]

    hosts = allowed_hosts(opts.host, opts.allowed_hosts)
    mcp = build_mcp(memory, metrics=metrics)
    mcp_asgi = mcp_http_app(mcp, max_body=opts.max_body)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        kg = await open_kg()
        holder["m"] = mem = app.state.memory = Memory(kg)
        flusher = asyncio.create_task(_flush_every(kg, opts.flush_seconds))
        # wait=false episodes are queued in the store; this worker writes them (an embedded
        # store is this process's alone, so no `kg worker` could reach them).
        background = Background(kg, opts.graceful_seconds) if opts.worker else None
        app.state.background = background
        try:
            async with mcp.session_manager.run():
                yield
        finally:
            n = await mem.writes.drain()
            log.info("shutdown: %d write(s) were in flight, all finished", n)
            if background is not None:
                # The episode being written is finished (or, past the graceful timeout, its
                # extraction given up and handed back), the rest queued.
                stats = await background.stop()
                log.info("shutdown: background worker stopped (%s)", stats)
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
            await kg.close()
            holder.clear()
            app.state.memory = None

    app = FastAPI(
        title="kg",
        version=VERSION,
        summary="Bi-temporal knowledge-graph memory for agents; the group comes from the key.",
        lifespan=lifespan,
        docs_url=None,  # the UIs load scripts from a CDN; the spec is at /openapi.json
        redoc_url=None,
        responses=ERRORS,
        dependencies=[Depends(known_query)],
    )

    # -- error handling -------------------------------------------------------------------

    @app.exception_handler(KGError)
    async def kg_error(request: Request, exc: KGError) -> JSONResponse:
        status, title = status_of(exc)
        if status >= 500:
            log.warning("%s %s: %s", request.method, request.url.path, exc)
        return problem(status, title, " ".join(str(exc).split()), problem_kind(exc), request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for e in exc.errors()[:5]:
            loc = ".".join(str(p) for p in e.get("loc", ()) if p not in ("body", "query"))
            parts.append(f"{loc or 'input'}: {e.get('msg', 'invalid')}")
        return problem(422, "Invalid input", "; ".join(parts), "validation", request)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem(
            exc.status_code, str(exc.detail), str(exc.detail), f"http_{exc.status_code}", request
        )

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return problem(
            500, "Internal error", "internal error; see the server log", "internal", request
        )

    # -- service routes -------------------------------------------------------------------

    @app.get("/health", tags=["service"])
    async def health() -> Health:
        """Liveness: the server is up and holds its store (no key needed)."""
        return Health(store=memory().kg.store.backend, version=VERSION)

    @app.get(
        "/metrics",
        tags=["service"],
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    async def prometheus(
        cred: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> Response:
        """Prometheus text format: requests and MCP tool calls per route and tool. With the
        operator's metrics token (`kg serve --metrics-token`) as bearer, also each keyed
        group's size, ingest and query metrics (what `kg stats` shows)."""
        groups = []
        token = opts.metrics_token
        if token and cred is not None and hmac.compare_digest(cred.credentials, token):
            kg = memory().kg
            names = sorted({k.scope for k in await kg.store.keys() if k.revoked_at is None})
            for g in names:
                groups.append((await kg.stats(g), await kg.metrics(g)))
        return Response(metrics.render(groups), media_type="text/plain; version=0.0.4")

    # -- the key's group ------------------------------------------------------------------

    @app.get("/v1/whoami", tags=["keys"])
    async def whoami(c: Caller) -> Whoami:
        """The group and role this key is bound to."""
        p: Principal = c.principal
        return Whoami(group_id=p.group_id, role=p.role, key_id=p.key_id, channel=p.channel)

    @app.post("/v1/episodes", tags=["write"])
    async def add_episode(c: Caller, body: AddEpisode) -> EpisodeResult:
        """Add one episode (role write), on the key's channel unless the body names a lower
        one (a higher trust than the key's is a 403). Answers once it is in the graph;
        re-sending the same content is a no-op (`status: duplicate`); a failed extraction is
        a 502, recorded as a failed episode that re-sending retries. With `wait: false` it
        answers at once (`status: queued`): the episode is searchable, and the server's
        background worker writes its facts in order; GET /v1/episodes/{id} shows its
        status."""
        return await c.add(body)

    @app.get("/v1/episodes", tags=["read"])
    async def list_episodes(
        c: Caller, limit: PageLimit = 50, cursor: Cursor = None
    ) -> Page[EpisodicNode]:
        """The latest episodes, newest first, whatever their status (ingested, failed with its
        error, rolled back), a page at a time: `next_cursor` fetches the next page."""
        return await c.episodes(limit=limit, cursor=cursor)

    @app.get("/v1/episodes/{episode_id}", tags=["read"])
    async def get_episode(
        c: Caller, episode_id: Annotated[str, Path(max_length=200)]
    ) -> EpisodicNode:
        """One episode of this group, with its content and metrics."""
        return await c.episode(episode_id)

    @app.post("/v1/episodes/{episode_id}/retry", tags=["write"])
    async def retry_episode(
        c: Caller, episode_id: Annotated[str, Path(max_length=200)]
    ) -> EpisodeResult:
        """Extract a failed episode again (role write); 502 if it fails again (still
        recorded as failed), 422 if the episode did not fail."""
        return await c.retry(episode_id)

    @app.get("/v1/facts", tags=["read"])
    async def facts(c: Caller, q: Annotated[FactsQuery, Query()]) -> list[Fact]:
        """What was true at `valid_at`, as kg knew it at `known_at` (both default now)."""
        return await c.facts(q)

    @app.get("/v1/history", tags=["read"])
    async def history(c: Caller, q: Annotated[HistoryQuery, Query()]) -> list[Fact]:
        """Every version of the matching facts, closed ones included, with provenance."""
        return await c.history(q)

    @app.get("/v1/facts/{fact_id}/why", tags=["read"])
    async def why(c: Caller, fact_id: Annotated[str, Path(max_length=200)]) -> WhyResponse:
        """A fact's versions, the episodes that created, reinforced and closed it, and what
        each supporting episode said about it."""
        return await c.why_said(fact_id)

    @app.post("/v1/facts/{fact_id}/correct", tags=["write"])
    async def correct(
        c: Caller, fact_id: Annotated[str, Path(max_length=200)], body: Correction
    ) -> EpisodeResult:
        """'That changed' (role write): the right value and since when, stored as a
        structured episode on the key's channel that closes the old value through the
        timeline rules when the key's trust reaches it (never an overwrite; rollback undoes
        it)."""
        return await c.correct(fact_id, body)

    @app.get("/v1/entities", tags=["read"])
    async def entities(
        c: Caller,
        q: Annotated[str, Query(max_length=200, description="Part of the name; '' for all.")] = "",
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[EntitySummary]:
        """Entities whose name contains `q`, those with the most fact versions first: what
        to pick a subject from."""
        return await c.entities(contains=q, limit=limit)

    @app.post("/v1/search", tags=["read"])
    async def search(c: Caller, body: SearchRequest) -> SearchResults:
        """Hybrid search in any time view; `branches` holds each branch's hits and latency
        (the CLI's --explain)."""
        return await c.search(body)

    @app.post("/v1/context", tags=["read"])
    async def context(c: Caller, body: ContextRequest) -> ContextResponse:
        """Search, rendered as a quoted-data block for a prompt within `max_tokens`."""
        return ContextResponse(context=await c.context(body))

    @app.get("/v1/log", tags=["read"])
    async def audit_log(
        c: Caller,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
        closures: bool = True,
    ) -> list[AuditEvent]:
        """The audit trail, newest first: rollbacks, erasures and closures of facts."""
        return await c.log(limit=limit, closures=closures)

    @app.get("/v1/quarantine", tags=["read"])
    async def quarantine(
        c: Caller, limit: PageLimit = 50, cursor: Cursor = None
    ) -> Page[QuarantineEntry]:
        """What the instruction guard held back from tools, documents and agents, newest
        first: `limit` episodes' worth a page, `next_cursor` for the next."""
        return await c.quarantine(limit=limit, cursor=cursor)

    @app.get("/v1/stats", tags=["read"])
    async def stats(c: Caller) -> StatsResponse:
        """Counts, and the ingest and query metrics (as `kg stats`)."""
        return await c.stats()

    @app.get("/v1/metrics", tags=["read"])
    async def group_metrics(c: Caller) -> Metrics:
        """The group's ingest and query metrics."""
        return await c.metrics()

    @app.post("/v1/rollback", tags=["admin"])
    async def rollback(c: Caller, body: RollbackRequest) -> RollbackReport:
        """Undo episodes as if never ingested. A dry run (the plan) by default, for any role;
        `apply: true` carries it out atomically and needs the admin role."""
        return await c.rollback(body)

    @app.post("/v1/erase/entity", tags=["admin"])
    async def erase_entity(c: Caller, body: EraseEntityRequest) -> ErasureReceipt:
        """Physically delete a subject (admin); `confirm` repeats the name. Not undoable."""
        return await c.erase_entity(body)

    @app.post("/v1/erase/group", tags=["admin"])
    async def erase_group(c: Caller, body: EraseGroupRequest) -> ErasureReceipt:
        """Physically delete this key's whole group (admin); `confirm` is the group id."""
        return await c.erase_group(body)

    @app.get(
        "/v1/export",
        tags=["admin"],
        response_class=StreamingResponse,
        responses={200: {"content": {"application/x-ndjson": {"schema": {"type": "string"}}}}},
    )
    async def export(c: Caller, embeddings: bool = True) -> StreamingResponse:
        """The group as JSON Lines, as `kg export` writes it (admin)."""
        lines = c.export(embeddings=embeddings)
        first = await anext(lines, None)  # errors before the first line are still problems

        async def body() -> AsyncIterator[str]:
            if first is not None:
                yield first + "\n"
                async for line in lines:
                    yield line + "\n"

        return StreamingResponse(body(), media_type="application/x-ndjson")

    mount_inspector(app)
    app.router.routes.append(Route("/mcp", McpAuth(mcp_asgi), methods=["GET", "POST", "DELETE"]))
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    # Outermost last: the access log and metrics see every answer, then the Host / Origin
    # guard, a key whose allowance is spent (no lookup), the key (looked up once), its
    # limits, and the body's size and time limits.
    app.add_middleware(BodyLimits, max_body=opts.max_body, body_seconds=opts.body_seconds)
    limiter = Limiter(opts.key_limits)
    app.add_middleware(PerKey, limiter=limiter)
    app.add_middleware(Authenticate, memory=memory)
    app.add_middleware(SpentKeys, limiter=limiter)
    app.add_middleware(HostGuard, policy=hosts)
    app.add_middleware(Observe, metrics=metrics, routes=app.router.routes, memory=memory)
    app.add_middleware(AccessLog, routes=app.router.routes)
    return app


class McpAuth:
    """The MCP endpoint's door: the same bearer keys as the HTTP API. The principal travels
    in the request's scope, where each tool call reads it (kg.server.mcp.principal_of)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = scope.setdefault("state", {})
        state["route"] = "/mcp"
        found = principal(scope)
        if isinstance(found, KGError):
            status, title = status_of(found)
            state["problem"] = problem_kind(found)
            await problem(status, title, str(found))(scope, receive, send)
            return
        if found is None:
            state["problem"] = "unauthorized_error"
            detail = (
                "invalid or revoked API key"
                if bearer_of(scope) is not None
                else "no API key: send 'Authorization: Bearer <key>'"
            )
            await problem(401, "Unauthorized", detail)(scope, receive, send)
            return
        state[PRINCIPAL] = found
        await self.app(scope, receive, send)


async def _flush_every(kg: KG, seconds: float) -> None:
    """Query metrics reach the store every `seconds`, so `kg stats` sees a live server's."""
    while True:
        await asyncio.sleep(seconds)
        try:
            await kg.flush_metrics()
        except KGError as exc:
            log.warning("query metrics not saved: %s", exc)


def _openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        spec = get_openapi(
            title=app.title, version=app.version, summary=app.summary, routes=app.routes
        )
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        schemas["Problem"] = Problem.model_json_schema()
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        for path, ops in spec.get("paths", {}).items():
            for op in ops.values():
                responses = op.setdefault("responses", {})
                for code, doc in ERRORS.items():
                    responses[str(code)] = doc
                if path in ("/health", "/metrics"):
                    for code in ("400", "401", "403", "404", "413", "422", "429"):
                        responses.pop(code, None)
                if path == "/metrics":
                    op["security"] = [{}, {"ApiKey": []}]  # the token is optional
        app.openapi_schema = spec
    return app.openapi_schema
