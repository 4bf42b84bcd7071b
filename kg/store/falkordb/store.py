"""FalkorDB backend: embedded (default) or an external server at falkordb://host:port.

One graph per group: the group is a structural boundary (indexes, vector search and erasure
are per graph), not only a filter. Nodes and edges still carry `group_id`, as Graphiti's do.
Times are stored as fixed-width UTC ISO-8601 strings, whose lexical order is time order.
A write plan runs as one query of CALL {} subqueries; FalkorDB executes a query atomically.
Its first clause checks and moves the group's version (kg.store.cypher.base.Fence): when the
version has moved on, that clause yields no row, so no subquery runs and nothing is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
from collections.abc import Awaitable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kg.errors import (
    DataDirLockedError,
    KGError,
    LeaseLostError,
    StoreError,
    StoreUnavailableError,
    WriteConflictError,
)
from kg.schemas.keys import KEYS_NAMESPACE
from kg.schemas.plan import GroupVersion, WritePlan
from kg.schemas.search import Scope
from kg.schemas.store import (
    STAGING_PREFIX,
    PendingErasure,
    PlanningNames,
    PlanningReads,
    Record,
    is_staging,
)
from kg.schemas.validation import GROUP_ID_RE, check_group_id
from kg.store.cypher.base import GROUP_LABEL, KEYLESS_PAGE, Fence, key_backfill
from kg.store.cypher.dialect import Guard, Statement
from kg.store.cypher.store import CypherStore
from kg.store.falkordb import persistence, query_log
from kg.store.falkordb.ddl import FALKORDB_INDEXES, FALKORDB_UNIQUE, falkordb_vector_indexes
from kg.store.falkordb.dialect import FalkorDialect
from kg.store.falkordb.embedded import (
    Durability,
    EmbeddedServer,
    ProgressCallback,
    owner_name,
    pid_alive,
)

log = logging.getLogger("kg")
INDEX_WAIT_SECONDS = 120
# Erasures in progress: a plain hash beside the graphs (':' is not allowed in a group id, and
# GRAPH.LIST lists graphs only), so dropping a group's graph cannot take its record with it.
PENDING_ERASURES_KEY = "kg:pending-erasures"
# The label whose index a search of each scope reads.
_INDEXED_LABEL = {
    Scope.facts: "RELATES_TO",
    Scope.entities: "Entity",
    Scope.episodes: "Episodic",
    Scope.communities: "Community",
}
_STAGING_RE = re.compile(rf"^{re.escape(STAGING_PREFIX)}[A-Za-z0-9_-]{{1,64}}:[0-9a-f]{{8,32}}\Z")


@contextlib.contextmanager
def translated(action: str) -> Iterator[None]:
    """Redis and socket failures as kg's errors, one line each: a lost or silent server is
    StoreUnavailableError; anything else the server or client refuses is StoreError.
    (ResponseErrors a caller expects, such as 'empty key', are handled inside the block.)"""
    try:
        yield
    except RedisTimeoutError as exc:
        raise StoreUnavailableError(
            f"FalkorDB did not answer in time ({action}): {_line(exc)}"
        ) from exc
    except (RedisConnectionError, OSError) as exc:
        raise StoreUnavailableError(f"lost the FalkorDB server ({action}): {_line(exc)}") from exc
    except RedisError as exc:
        raise StoreError(f"FalkorDB refused {action}: {_line(exc)}") from exc


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


_SURROGATE = re.compile(r"[\ud800-\udfff]")


class _Refused(Exception):
    """A parameter `check_params` refuses; raised without its path, which is found after."""


def _literal(value: Any) -> str:
    """`value` as the falkordb client writes it into the query header (its
    `stringify_param_value`, same text), refusing on the way what `check_params` refuses:
    one pass over a write's parameters instead of two. The types a write's rows hold come
    first, by exact type (most of a bulk write is strings in maps in lists); anything else
    takes `_other_literal`."""
    kind = type(value)
    if kind is str:
        return _string_literal(value)
    if kind is dict:
        return _map_literal(value)
    if kind is list:
        return "[" + ",".join([_literal(v) for v in value]) + "]"
    if kind is int:
        return _int_literal(value)
    return _other_literal(value)


def _map_literal(value: dict[Any, Any]) -> str:
    parts = []
    for k, v in value.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise _Refused
        parts.append(f"`{k}`:{_literal(v)}")
    return "{" + ",".join(parts) + "}"


def _int_literal(value: int) -> str:
    if not -(2**63) <= value < 2**63:
        raise _Refused
    return str(value)


def _string_literal(value: str) -> str:
    if "\x00" in value or (not value.isascii() and _SURROGATE.search(value)):
        raise _Refused
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _other_literal(value: Any) -> str:
    if isinstance(value, str):
        return _string_literal(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return _int_literal(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Refused
        return str(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join([_literal(v) for v in value]) + "]"
    if isinstance(value, dict):
        return _map_literal(value)
    raise _Refused


def params_header(params: dict[str, Any]) -> str:
    """The `CYPHER name=value ...` header the client would put before the query for
    `params` (nothing for none), after the checks of `check_params` (its error if refused)."""
    if not params:
        return ""
    try:
        return "CYPHER " + "".join(f"`{k}`={_literal(v)} " for k, v in params.items())
    except _Refused:
        check_params(params)  # raises the StoreError that names the parameter
        raise StoreError("a parameter cannot be sent to FalkorDB") from None


def check_params(value: Any, path: str = "$") -> None:
    """The falkordb client splices parameters into the query header as text; refuse what that
    text cannot carry faithfully instead of letting it corrupt the query."""
    if isinstance(value, str):
        if "\x00" in value:
            raise StoreError(f"parameter {path} contains a NUL character")
        if _SURROGATE.search(value):  # the client would fail to encode the query as UTF-8
            raise StoreError(f"parameter {path} contains a lone surrogate (not valid Unicode)")
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        if not -(2**63) <= value < 2**63:  # FalkorDB would read it as another number
            raise StoreError(f"parameter {path} is outside the 64-bit integer range")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise StoreError(f"parameter {path} is {value!r}; only finite numbers can be stored")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_params(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str) or not k.isidentifier():
                raise StoreError(f"parameter {path} has a key {k!r} that is not an identifier")
            check_params(item, f"{path}.{k}")
    else:
        raise StoreError(f"parameter {path} has unsupported type {type(value).__name__}")


def _pool(**kwargs: Any) -> Any:
    """Callers beyond the pool size wait for a connection instead of failing ("Too many
    connections" is what redis-py's default pool raises), so concurrent agents just queue.

    No read timeout (redis-py 8 defaults to 5 s): a write plan is one query, and a large one
    (a 20,000-fact episode, an import batch, a rollback of thousands of timelines) runs
    longer. A client that stops waiting does not stop the server: the write would complete
    while kg reported it unwritten. A server that goes away still closes the socket."""
    from redis.asyncio import BlockingConnectionPool

    return BlockingConnectionPool(
        max_connections=16, timeout=60, decode_responses=True, socket_timeout=None, **kwargs
    )


class FalkorDBStore(CypherStore):
    backend = "falkordb"
    dialect = FalkorDialect()

    def __init__(
        self,
        db: Any,
        server: EmbeddedServer | None,
        embedding_dim: int | None,
        *,
        owner_pid: int | None = None,
    ) -> None:
        self._db = db
        self.server = server
        # Set when attached to the embedded server another kg process owns (`attach`):
        # its pid, and how notes name it ("kg serve (pid N)").
        self.owner_pid = owner_pid
        self.owner = owner_name(owner_pid) if owner_pid is not None else None
        self.embedding_dim = embedding_dim
        self._ready: set[str] = set()
        self._indexed: set[tuple[str, str | None]] = set()
        self._folding: asyncio.Future[None] | None = None
        self._hushed: set[str] = set()  # groups whose query log is blocked (external server)

    @classmethod
    async def embedded(
        cls,
        home: Path,
        *,
        durability: Durability = "everysec",
        embedding_dim: int | None = None,
        progress: ProgressCallback | None = None,
        start_timeout: float = 30.0,
    ) -> FalkorDBStore:
        """Start the embedded server on `home` and wait for its data to load, reporting
        through `progress`; a long command log it had to replay is folded in the background.
        `start_timeout` bounds the wait for the server to listen, not its loading."""
        from falkordb.asyncio import FalkorDB
        from redis.asyncio import UnixDomainSocketConnection

        server = EmbeddedServer(home, durability)
        socket = await server.start(start_timeout, progress=progress)
        pool = _pool(connection_class=UnixDomainSocketConnection, path=socket)
        store = cls(FalkorDB(connection_pool=pool), server, embedding_dim)
        # The server logs no queries (query_log.MODULE_ARGS); streams an older kg let it
        # write stay in the files until replaced.
        with translated("to clear FalkorDB's query log"):
            await query_log.scrub(store._db.connection, [], own_server=True)
        store._folding = asyncio.ensure_future(store._fold_in_background())
        return store

    async def _fold_in_background(self) -> None:
        try:
            await self.fold_history(wait=False)
        except KGError as exc:  # the close folds again, or reports
            log.warning("could not compact the store's files after loading: %s", exc)

    @classmethod
    async def attach(
        cls,
        socket: str,
        *,
        owner_pid: int,
        embedding_dim: int | None = None,
        durability: Durability = "everysec",
    ) -> FalkorDBStore:
        """Connect to the embedded server kg process `owner_pid` owns (see `running_socket`),
        without owning it: closing disconnects and leaves that server running, and its files
        stay the owner's to fold. Writers share it as they share any FalkorDB server: every
        write plan is fenced by its group's version, every queue claim by its lease. The
        server fsyncs as its owner started it, so asking for `always` of an `everysec`
        server is refused rather than quietly weakened."""
        from falkordb.asyncio import FalkorDB
        from redis.asyncio import UnixDomainSocketConnection

        pool = _pool(connection_class=UnixDomainSocketConnection, path=socket)
        with translated(f"connecting to the store {owner_name(owner_pid)} holds"):
            db = FalkorDB(connection_pool=pool)
            fsync = (await db.connection.config_get("appendfsync")).get("appendfsync")
        if durability == "always" and fsync != "always":
            await db.connection.aclose()
            raise DataDirLockedError(
                f"--durability always: the store is held by {owner_name(owner_pid)}, whose "
                f"server fsyncs {fsync}; stop it, or start it with --durability always"
            )
        return cls(db, None, embedding_dim, owner_pid=owner_pid)

    def owner_alive(self) -> bool:
        """Whether the kg process whose server this store shares still runs (its server
        stops with it); True for a store that shares none."""
        return self.owner_pid is None or pid_alive(self.owner_pid)

    @property
    def is_embedded(self) -> bool:
        """kg's own embedded server, this process's or another kg process's: it logs no
        queries (started with CMD_INFO no) and holds nothing but kg's data."""
        return self.server is not None or self.owner_pid is not None

    @classmethod
    async def connect(cls, uri: str, *, embedding_dim: int | None = None) -> FalkorDBStore:
        from falkordb.asyncio import FalkorDB

        u = urlparse(uri)
        try:
            pool = _pool(
                host=u.hostname or "localhost",
                port=u.port or 6379,
                username=u.username,
                password=u.password,
                socket_connect_timeout=5,
            )
            db = FalkorDB(connection_pool=pool)
            await db.connection.ping()
        except (RedisError, OSError) as exc:
            raise StoreUnavailableError(f"cannot reach FalkorDB at {uri}: {_line(exc)}") from exc
        return cls(db, None, embedding_dim)

    @property
    def client(self) -> Any:
        """The falkordb-py client (`falkordb.asyncio.FalkorDB`), for tools that speak to
        FalkorDB directly, such as graphiti-core's FalkorDriver."""
        return self._db

    def _graph(self, group_id: str) -> Any:
        """A group's graph, the reserved key namespace, or an import's staging graph
        (kg.transfer loads into one)."""
        if group_id == KEYS_NAMESPACE:  # reserved: never a group (see kg.schemas.keys)
            return self._db.select_graph(KEYS_NAMESPACE)
        if not _STAGING_RE.match(group_id):
            check_group_id(group_id)
        return self._db.select_graph(group_id)

    async def _hush(self, group_id: str) -> None:
        """An external server may log every query with its parameters (its operator's
        `CMD_INFO`, on by default): block the group's query-log stream before the first
        query this process sends it (see kg.store.falkordb.query_log). The embedded server
        logs none."""
        if self.is_embedded or group_id in self._hushed or group_id == KEYS_NAMESPACE:
            return
        with translated("to turn off FalkorDB's query log for the group"):
            await query_log.block(self._db.connection, group_id)
        self._hushed.add(group_id)

    async def ensure_schema(self, group_id: str) -> None:
        """Create what the group's graph lacks, and only that: the graph's own index and
        constraint lists are read first (reads are not logged), so an existing group costs
        no command in the append-only file."""
        if group_id in self._ready or group_id == KEYS_NAMESPACE:
            return
        await self._hush(group_id)
        graph = self._graph(group_id)
        specs = list(FALKORDB_INDEXES)
        if self.embedding_dim:
            specs += falkordb_vector_indexes(self.embedding_dim)
        with translated("a schema statement"):
            indexes = await self._schema_rows(graph, "CALL db.indexes()")
            for spec in specs:
                if spec.missing_from(indexes):
                    await self._ddl(graph.query(spec.cypher))
            constraints = {
                (r.get("label"), tuple(r.get("properties") or ()))
                for r in await self._schema_rows(graph, "CALL db.constraints()")
                if r.get("type") == "UNIQUE"
                and r.get("entitytype") == "NODE"
                and r.get("status") != "FAILED"
            }
            for label, prop in FALKORDB_UNIQUE:
                if (label, (prop,)) in constraints:
                    continue
                await self._ddl(
                    self._db.connection.execute_command(
                        "GRAPH.CONSTRAINT",
                        "CREATE",
                        group_id,
                        "UNIQUE",
                        "NODE",
                        label,
                        "PROPERTIES",
                        "1",
                        prop,
                    )
                )
            while keyless := await self._schema_rows(graph, KEYLESS_PAGE):
                for stmt in key_backfill(self.dialect, keyless):
                    await graph.query(stmt.query, stmt.params)
        self._ready.add(group_id)

    @staticmethod
    async def _schema_rows(graph: Any, query: str) -> list[dict[str, Any]]:
        try:
            result = await graph.ro_query(query)
        except ResponseError as exc:
            if "empty key" in str(exc):
                return []  # a new group: nothing there yet
            raise StoreError(f"FalkorDB refused schema statement: {_line(exc)}") from exc
        return _rows(result)

    @staticmethod
    async def _ddl(awaitable: Awaitable[Any]) -> None:
        try:
            await awaitable
        except ResponseError as exc:
            msg = str(exc).lower()
            if "already indexed" in msg or "already exists" in msg:
                return
            raise StoreError(f"FalkorDB refused schema statement: {_line(exc)}") from exc

    async def _read(
        self, group_id: str, query: str, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        header = params_header(params)
        await self._hush(group_id)
        with translated("a read"):
            try:
                result = await self._graph(group_id).ro_query(header + query)
            except ResponseError as exc:
                if "empty key" in str(exc):
                    return []  # the group's graph does not exist yet
                raise StoreError(f"FalkorDB refused a read: {_line(exc)}") from exc
        return _rows(result)

    async def execute(
        self,
        group_id: str,
        statements: list[Statement],
        fence: Fence | None = None,
        guard: Guard | None = None,
    ) -> GroupVersion | None:
        version, _ = await self._execute(group_id, statements, fence, guard)
        return version

    async def apply_many(
        self, plans: list[WritePlan], names: PlanningNames | None
    ) -> tuple[GroupVersion, PlanningReads | None]:
        """One query: the plans' write, then (with `names`) the next planning read, which
        sees that write (FalkorDB runs a query's clauses in order, alone on the graph)."""
        group, last = plans[0].group_id, plans[-1].episode.created_at
        fence = Fence(plans[0].base, tx=self.dialect.encode_time(last))
        then = self.planning_read(group, names) if names is not None else None
        version, rows = await self._execute(group, self.compile_many(plans), fence, None, then)
        assert version is not None
        if names is None:
            return version, None
        return version, self.planning_rows([r for r in rows if r["kind"] is not None])

    async def _execute(
        self,
        group_id: str,
        statements: list[Statement],
        fence: Fence | None,
        guard: Guard | None,
        then: Statement | None = None,
    ) -> tuple[GroupVersion | None, list[dict[str, Any]]]:
        """`execute`; with `then` (a fenced write only), a read after the writes in the same
        query: its rows (columns kind, p, source, target; one row more with kind null)."""
        params: dict[str, Any] = {"group_id": group_id} if fence or guard else {}
        extra = [Statement("", fence.params() if fence else {})]
        extra += [Statement("", guard.params)] if guard else []
        extra += [then] if then else []
        for s in [*statements, *extra]:
            for k, v in s.params.items():
                if k in params and params[k] != v:
                    raise StoreError(f"plan statements disagree on parameter ${k}")
                params[k] = v
        header = params_header(params)
        calls = " ".join(f"CALL {{ {s.query} }}" for s in statements)
        # The checks are the query's first clauses (the lease, then the version): when one
        # matches nothing, no row is left and no CALL {} after it runs. One query is atomic.
        head = f"{guard.match} WITH kg_guard LIMIT 1 " if guard is not None else ""
        if fence is None:
            query, ret = head + calls, " RETURN 1 AS ok"
        else:
            query, ret = (
                f"{head}{_fenced(fence)} WITH kg_g {calls}",
                (
                    " RETURN kg_g.version AS token, kg_g.writes AS writes, kg_g.tx AS tx, "
                    "kg_g.hold AS hold"
                ),
            )
            if then is not None:  # the row with kind null stands for the write itself
                query += (
                    f" WITH kg_g CALL {{ {then.query} UNION ALL RETURN null AS kind, "
                    "null AS p, null AS source, null AS target }"
                )
                ret += ", kind, p, source, target"
            if fence.base is not None and fence.base.token is None:
                # Planned against a group with no writes yet: it may have been erased, by
                # another process too, since this one created its indexes. Create them again
                # (and block its query log again: the graph's deletion deleted its key).
                self._ready.discard(group_id)
                self._hushed.discard(group_id)
        # The schema comes first and inside the same translation: a server lost while the
        # indexes are created is the same one-line error as one lost during the write.
        with translated("the write plan (nothing written)"):
            await self.ensure_schema(group_id)
            try:
                result = await self._graph(group_id).query(header + query + ret)
            except ResponseError as exc:
                raise StoreError(
                    f"FalkorDB refused the write plan (nothing written): {_line(exc)}"
                ) from exc
        rows = _rows(result)
        if not rows:
            if guard is not None and not await self._guard_holds(group_id, guard):
                raise LeaseLostError(guard.failure)
            if fence is not None:
                raise fence.conflict(group_id)
        if fence is None:
            return None, rows
        return self._group_version(rows[0]), rows

    async def _guard_holds(self, group_id: str, guard: Guard) -> bool:
        """Whether a guard that just missed holds now: a lease once lost is never this
        owner's again, so a miss with the guard still holding was the version's."""
        query = f"{guard.match} RETURN 1 AS ok LIMIT 1"
        return bool(await self._read(group_id, query, {**guard.params, "group_id": group_id}))

    async def _queue_write(self, group_id: str, statement: Statement) -> list[dict[str, Any]]:
        # FalkorDB runs each query alone under its graph's write lock: one query is atomic.
        header = params_header(statement.params)
        await self._hush(group_id)
        with translated("a queue write"):
            await self.ensure_schema(group_id)
            try:
                return _rows(await self._graph(group_id).query(header + statement.query))
            except ResponseError as exc:
                raise StoreError(f"FalkorDB refused a queue write: {_line(exc)}") from exc

    async def raw_query(
        self,
        group_id: str,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        write: bool = False,
    ) -> list[dict[str, Any]]:
        graph = self._graph(group_id)
        await self._hush(group_id)
        with translated("a raw query"):
            if write:
                return _rows(await graph.query(query, params or {}))
            return _rows(await graph.ro_query(query, params or {}))

    async def index_statuses(self, group_id: str) -> list[str]:
        """Each index's status in the group's graph ('OPERATIONAL' once built)."""
        return [status for _, status in await self._index_states(group_id)]

    async def _index_states(self, group_id: str) -> list[tuple[str, str]]:
        """(label, status) of each index of the group's graph; a label being built shows
        its progress ('[Indexing] 4568/100000: UNDER CONSTRUCTION')."""
        rows = await self._read(
            group_id, "CALL db.indexes() YIELD label, status RETURN label, status", {}
        )
        return [(str(r["label"]), str(r["status"])) for r in rows]

    async def _search_ready(self, group_id: str, scope: Scope | None = None) -> None:
        """FalkorDB builds full-text and vector indexes in the background (after a load, and
        after an index is created), and meanwhile answers from the partial index: a search
        then would silently miss documents. So the first search of a scope waits until its
        label's index is OPERATIONAL (an index holds a label's range, full-text and vector
        fields together); the other labels' need not be."""
        label = _INDEXED_LABEL[scope] if scope is not None else None
        if (group_id, label) in self._indexed or (group_id, None) in self._indexed:
            return
        building: list[str] = []
        try:
            async with asyncio.timeout(INDEX_WAIT_SECONDS):
                while True:
                    building = [
                        f"{lb} {st.split(':')[0].removeprefix('[Indexing] ')}"
                        for lb, st in await self._index_states(group_id)
                        if st != "OPERATIONAL" and label in (None, lb)
                    ]
                    if not building:
                        break
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise StoreError(
                f"group {group_id!r}: search indexes still building after "
                f"{INDEX_WAIT_SECONDS}s ({', '.join(building)} indexed); try again shortly"
            ) from None
        self._indexed.add((group_id, label))

    async def drop_group(self, group_id: str) -> None:
        with translated(f"to delete group {group_id!r}"):
            try:
                await self._graph(group_id).delete()
            except ResponseError as exc:
                if "empty key" not in str(exc):
                    raise StoreError(
                        f"FalkorDB refused to delete group {group_id!r}: {_line(exc)}"
                    ) from exc
        self._ready.discard(group_id)
        self._indexed = {(g, lb) for g, lb in self._indexed if g != group_id}
        self._hushed.discard(group_id)  # deleting the graph deleted its stream's key too

    async def compact(self) -> None:
        """Rewrite the append-only file from the live data set: the old AOF, which still holds
        every command ever run (deleted text included), is replaced and removed. FalkorDB's
        query logs are emptied first (kg.store.falkordb.query_log): the rewrite would copy a
        query-log stream into the new base. On an external server, only the groups this
        process worked on (the erased one among them): the others may not be kg's."""
        conn = self._db.connection
        own = self.is_embedded
        with translated("to compact its files"):
            groups = await self.groups() if own else sorted(self._hushed)
            await query_log.scrub(conn, groups, own_server=own)
            await persistence.rewrite(conn)

    async def pending_erasures(self) -> list[PendingErasure]:
        with translated("to read pending erasures"):
            raw = await self._db.connection.hgetall(PENDING_ERASURES_KEY)
        return sorted(
            (PendingErasure.model_validate_json(v) for v in raw.values()),
            key=lambda p: (p.created_at, p.uuid),
        )

    async def record_erasure(self, erasure: PendingErasure) -> None:
        # In the AOF before the delete that follows it: a crash keeps a prefix of the log,
        # so a surviving delete always has its record.
        with translated("to record an erasure"):
            await self._db.connection.hset(
                PENDING_ERASURES_KEY, erasure.uuid, erasure.model_dump_json()
            )

    async def clear_erasure(self, uuid: str) -> None:
        with translated("to clear an erasure record"):
            await self._db.connection.hdel(PENDING_ERASURES_KEY, uuid)

    async def load_staged(self, group_id: str, staging: str, items: Sequence[Record]) -> None:
        # The records keep the target's group_id; the staging graph is only where they wait.
        # The group's version node comes first, unversioned (the first write sets it), so it
        # is node 0: on loading an RDB, FalkorDB 4.16 leaves out of its edge indexes every edge
        # whose source is node 0, and an imported group then lost that node's facts to `why`,
        # history and export once the store reopened (an ingested group's node 0 is this
        # node too: the first write's fence creates it first).
        if statements := self.compile_load(check_group_id(group_id), items):
            anchor = Statement(
                f"MERGE (:{GROUP_LABEL} {{group_id: $group_id}})", {"group_id": group_id}
            )
            await self.execute(staging, [anchor, *statements])

    async def publish_staged(self, group_id: str, staging: str) -> None:
        """RENAMENX: a key rename, O(1) and atomic, refused if the group appeared meanwhile.
        The graph's indexes and constraints go with it."""
        with translated(f"to publish the import into {group_id!r}"):
            renamed = await self._db.connection.execute_command(
                "RENAMENX", staging, check_group_id(group_id)
            )
        if not renamed:
            raise WriteConflictError(
                f"group {group_id!r} was created while the import ran; nothing was imported"
            )
        self._ready.discard(staging)
        # FalkorDB deletes the renamed graph's query-log key; the group's is blocked (again)
        # before this process's next query there.
        self._hushed -= {staging, group_id}

    async def drop_staged(self, staging: str) -> None:
        if not _STAGING_RE.match(staging):
            raise StoreError(f"{staging!r} is not a staging graph")
        await self.drop_group(staging)

    async def staged(self, group_id: str) -> list[str]:
        with translated("to list staged imports"):
            names = await self._db.list_graphs()
        return sorted(n for n in names if is_staging(n, check_group_id(group_id)))

    async def groups(self) -> list[str]:
        # Neither the key namespace nor an import's staging graph is a group: both hold ':'.
        with translated("to list groups"):
            return sorted(g for g in await self._db.list_graphs() if GROUP_ID_RE.match(g))

    async def has_group(self, group_id: str) -> bool:
        # A group is a graph of its own: GRAPH.LIST reads the key space, no graph is touched.
        with translated("to list groups"):
            return group_id in await self._db.list_graphs()

    async def fold_history(self, *, wait: bool) -> bool:
        """Embedded store: fold a command log that would take longer to replay than the base
        takes to load (or that holds a constraint) into a new base; see persistence.py. With
        `wait`, until done. An external server's persistence is its operator's."""
        if self.server is None:
            return False
        with translated("to compact its files"):
            return await persistence.fold(self._db, self.server.data_dir, wait=wait)

    async def close(self) -> None:
        """Fold a long command log into the base (so the next open loads data, not history),
        then stop the embedded server. A server already gone costs nothing here."""
        if self._folding is not None:
            self._folding.cancel()
            with contextlib.suppress(BaseException):
                await self._folding
        if self.server is not None and self.server.process is not None:
            try:
                await self.fold_history(wait=True)
            except KGError as exc:
                log.warning("could not compact the store's files on close: %s", exc)
        with contextlib.suppress(RedisError, OSError):
            await self._db.connection.aclose()
        if self.server is not None:
            await self.server.stop()


def _fenced(fence: Fence) -> str:
    """The query's first clause: one row, carrying the group node, only if the version is
    the one the plan was made at; every CALL {} after it runs once per row of it."""
    if fence.base is not None and fence.base.token is not None:
        head = (
            f"MATCH (kg_g:{GROUP_LABEL} {{group_id: $group_id}}) WHERE kg_g.version = $kg_expected"
        )
    else:
        head = f"MERGE (kg_g:{GROUP_LABEL} {{group_id: $group_id}})"
        if fence.base is not None:  # planned against a group nobody has written yet
            head += " WITH kg_g WHERE kg_g.version IS NULL"
    return f"{head} SET {fence.assignments('kg_g')}"


def _rows(result: Any) -> list[dict[str, Any]]:
    names = [h[1] for h in result.header]
    return [dict(zip(names, row, strict=True)) for row in result.result_set]
