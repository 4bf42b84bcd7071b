"""The HTTP API (FastAPI on uvicorn): one process, one KG, the group taken from the key.

The routes are routers per resource (`kg.server.routes`), over the shared service; every
`/v1` route authenticates a bearer key (`kg.server.routes.deps.caller`) and works in that
key's group only: another group's ids are answered 404, exactly as ids that exist nowhere.
Errors are RFC 9457 problem details (`kg.server.errors`); nothing answers a traceback.
Request bodies are bounded (`max_body`). The MCP server is mounted at `/mcp`
(kg.server.mcp), behind the same key check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, FastAPI
from mcp.server.mcpserver import MCPServer
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from kg.errors import KGError
from kg.facade import KG
from kg.queue import Worker, WorkerStats
from kg.server import errors, openapi
from kg.server.access import AccessLog
from kg.server.auth import Authenticate, authorized
from kg.server.bodies import BodyLimits
from kg.server.deprecation import Deprecations
from kg.server.errors import UnauthorizedError, status_of
from kg.server.hosts import HostGuard, allowed_hosts
from kg.server.inspector import mount_inspector
from kg.server.limits import KeyLimits, Limiter, PerKey, SpentKeys
from kg.server.mcp import PRINCIPAL, build_mcp, mcp_http_app
from kg.server.metrics import ServerMetrics, problem_kind
from kg.server.observe import Observe
from kg.server.problems import problem
from kg.server.request_ids import RequestIds
from kg.server.routes import ROUTERS
from kg.server.routes.admin import VERSION
from kg.server.routes.deps import known_query
from kg.server.service import Memory, ShuttingDownError

log = logging.getLogger("kg.server")
__all__ = ["VERSION", "ServeOptions", "UnauthorizedError", "begin_shutdown", "create_app"]


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


def lifespan_of(
    open_kg: Callable[[], Awaitable[KG]], opts: ServeOptions, mcp: MCPServer[Any]
) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """Open the KG at startup; at shutdown finish every write in flight, stop the worker,
    then close the KG."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        kg = await open_kg()
        app.state.memory = mem = Memory(kg)
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
            app.state.memory = None

    return lifespan


def create_app(
    open_kg: Callable[[], Awaitable[KG]], options: ServeOptions | None = None
) -> FastAPI:
    """The whole server as an ASGI app; `open_kg` runs at startup, the KG closes at shutdown
    after every write in flight has finished."""
    opts = options or ServeOptions()
    metrics = ServerMetrics()
    made: list[FastAPI] = []  # the app, once made: the MCP server asks for memory before it

    def memory() -> Memory:
        found = getattr(made[0].state, "memory", None) if made else None
        if not isinstance(found, Memory):
            raise ShuttingDownError("the server is not ready")
        return found

    mcp = build_mcp(memory, metrics=metrics)
    app = FastAPI(
        title="kg",
        version=VERSION,
        summary="Bi-temporal knowledge-graph memory for agents; the group comes from the key.",
        lifespan=lifespan_of(open_kg, opts, mcp),
        docs_url=None,  # the UIs load scripts from a CDN; the spec is at /openapi.json
        redoc_url=None,
        dependencies=[Depends(known_query)],
        generate_unique_id_function=openapi.operation_id,
    )
    made.append(app)
    app.state.metrics, app.state.metrics_token = metrics, opts.metrics_token
    errors.install(app)
    for router in ROUTERS:
        app.include_router(router)
    mount_inspector(app)
    mcp_asgi = mcp_http_app(mcp, max_body=opts.max_body)
    app.router.routes.append(Route("/mcp", McpAuth(mcp_asgi), methods=["GET", "POST", "DELETE"]))
    app.openapi = lambda: openapi.build(app)  # type: ignore[method-assign]
    # Outermost last: the access log and metrics see every answer, then the Host / Origin
    # guard, a key whose allowance is spent (no lookup), the key (looked up once), its
    # limits, the body's size and time limits, and the old names a request used.
    app.add_middleware(Deprecations)
    app.add_middleware(BodyLimits, max_body=opts.max_body, body_seconds=opts.body_seconds)
    limiter = Limiter(opts.key_limits)
    metrics.watch_keys(limiter.totals)
    app.add_middleware(PerKey, limiter=limiter)
    app.add_middleware(Authenticate, memory=memory)
    app.add_middleware(SpentKeys, limiter=limiter)
    app.add_middleware(HostGuard, policy=allowed_hosts(opts.host, opts.allowed_hosts))
    app.add_middleware(Observe, metrics=metrics, routes=app.router.routes, memory=memory)
    app.add_middleware(AccessLog, routes=app.router.routes)
    app.add_middleware(RequestIds)  # outermost: every log line of the request carries its id
    return app


class McpAuth:
    """The MCP endpoint's door: the same bearer keys, checked by the same function
    (`kg.server.auth.authorized`) as the HTTP API's. The principal travels in the request's
    scope, where each tool call reads it (kg.server.mcp.principal_of)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = scope.setdefault("state", {})
        state["route"] = "/mcp"
        try:
            state[PRINCIPAL] = authorized(scope)
        except KGError as exc:
            status, title = status_of(exc)
            state["problem"] = problem_kind(exc)
            await problem(status, title, " ".join(str(exc).split()))(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _flush_every(kg: KG, seconds: float) -> None:
    """Query metrics reach the store every `seconds`, so `kg stats` sees a live server's."""
    while True:
        await asyncio.sleep(seconds)
        try:
            await kg.flush_metrics()
        except KGError as exc:
            log.warning("query metrics not saved: %s", exc)
