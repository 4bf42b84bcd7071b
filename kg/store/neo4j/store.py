"""Neo4j 5 backend over Bolt: everything Neo4j-specific lives in this folder (dialect, DDL).

One database for all groups, each node and edge filtered by `group_id` (indexed together with
the property that anchors each query). Times are native DateTime. A write plan runs as one
query (its statements CALL {} subqueries) in one managed transaction, whose first clauses
write-lock the group's version node and check the version the plan was made at
(kg.store.cypher.base.Fence): a stale plan leaves no row, and the transaction rolls back with
nothing written. Round trips are the cost on a loaded machine (each wakes the server's
threads and this process): a write is two (BEGIN, RUN and PULL pipelined; COMMIT), a read one
(auto-commit). Tested against a live Neo4j 5.26 server (tests/test_neo4j_live.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlparse, urlunparse

from pydantic import BaseModel

from kg.errors import (
    InputError,
    LeaseLostError,
    StoreError,
    StoreUnavailableError,
    WriteConflictError,
)
from kg.schemas.plan import GroupVersion, WritePlan
from kg.schemas.search import Scope, SearchView
from kg.schemas.store import (
    PendingErasure,
    PlanningNames,
    PlanningReads,
    Record,
    is_staging,
    staging_name,
)
from kg.store.cypher.base import GROUP_LABEL, KEYLESS_PAGE, Fence, key_backfill
from kg.store.cypher.dialect import Guard, Statement
from kg.store.cypher.search import first_k
from kg.store.cypher.store import CypherStore
from kg.store.neo4j import cosine, fulltext
from kg.store.neo4j.cosine import (
    SIZE_TTL_SECONDS,
    exact_pays,
    exact_query,
    index_answer_complete,
    index_k,
    size_query,
    total_query,
)
from kg.store.neo4j.ddl import NEO4J_SCHEMA, neo4j_vector_indexes
from kg.store.neo4j.dialect import Neo4jDialect

NEO4J_SCHEMES = ("bolt", "bolt+s", "bolt+ssc", "neo4j", "neo4j+s", "neo4j+ssc")
log = logging.getLogger(__name__)
READ_ATTEMPTS = 3  # a read that fails with a retryable error is run again, up to this often

NEO4J_RESIDUE = (
    "Neo4j cannot scrub erased values from its files online: they stay in its transaction "
    "logs until rotated and pruned, and in freed store records, full-text index segments and "
    "range index pages until reused or merged. To remove them, export every group, stop the "
    "server, delete its database directory, start it anew and import (measured and tested: "
    "docs/production.md#erasure-on-neo4j)"
)


# The group's queue lock: taking a write lock on its node (setting a property does) serialises
# the queue's transitions per group, and reads after it see what the previous holder committed
# (Neo4j reads at read-committed: a condition read before the lock could be stale).
QUEUE_LOCK = "MERGE (kg_lock:KGQueue {group_id: $group_id}) SET kg_lock.locked = true"


class Neo4jStore(CypherStore):
    backend = "neo4j"
    dialect = Neo4jDialect()

    def __init__(self, driver: Any, database: str, embedding_dim: int | None) -> None:
        self._driver = driver
        self._database = database
        self.embedding_dim = embedding_dim
        self._schema_ready = False
        self._indexes_online = False
        # (group, scope) -> (the group's items, when counted)
        self._sizes: dict[tuple[str | None, Scope], tuple[int, float]] = {}

    @classmethod
    async def connect(cls, uri: str, *, embedding_dim: int | None = None) -> Neo4jStore:
        import neo4j
        from neo4j.exceptions import AuthError, ServiceUnavailable

        u = urlparse(uri)
        user = u.username or os.environ.get("NEO4J_USER", "neo4j")
        password = u.password or os.environ.get("NEO4J_PASSWORD", "")
        database = u.path.strip("/") or os.environ.get("NEO4J_DATABASE", "neo4j")
        netloc = u.hostname or "localhost"
        if u.port:
            netloc += f":{u.port}"
        bare = urlunparse((u.scheme, netloc, "", "", "", ""))
        # Notifications off: the server would send one per read of a label, type or property
        # a new database does not have yet (Community, HAS_MEMBER, `stale`, ...) and for every
        # `IF NOT EXISTS` DDL, and the driver logs each at WARNING/INFO: noise in users' logs.
        driver = neo4j.AsyncGraphDatabase.driver(
            bare, auth=(user, password), notifications_min_severity="OFF"
        )
        try:
            await driver.verify_connectivity()
        except AuthError:
            await driver.close()
            raise StoreUnavailableError(
                f"Neo4j at {bare} refused the credentials of user {user!r}: give the password "
                "in NEO4J_PASSWORD or the URI (bolt://user:password@host:port)"
            ) from None
        except (ServiceUnavailable, OSError, ValueError) as exc:
            await driver.close()
            raise StoreUnavailableError(f"cannot reach Neo4j at {bare}: {exc}") from exc
        return cls(driver, database, embedding_dim)

    async def ensure_schema(self, group_id: str) -> None:
        if self._schema_ready:
            return
        ddl = list(NEO4J_SCHEMA)
        if self.embedding_dim:
            ddl += neo4j_vector_indexes(self.embedding_dim)
        for stmt in ddl:
            await self._ddl(stmt)
        if self.embedding_dim:
            await self._check_vector_dimension(self.embedding_dim)
        while keyless := await self._read(group_id, KEYLESS_PAGE, {}):
            await self._run_write(key_backfill(self.dialect, keyless))
        await self._key_groups()
        self._schema_ready = True

    async def _ddl(self, stmt: str) -> None:
        try:
            await self._run_write([Statement(stmt, {})])
        except StoreError as exc:
            # Another process created the same index or constraint at the same moment:
            # `IF NOT EXISTS` does not cover two schema transactions racing to commit.
            if "AlreadyExists" not in str(exc):
                raise

    async def _key_groups(self) -> None:
        """Items written without a group key (before keys, or by another tool) get theirs,
        then a full-text index made without the key is made again with it (see
        kg.store.neo4j.fulltext): the items are keyed while the old index still answers, and
        the new one is built once, keys and all. A store keyed already reads and writes
        nothing more than a scan for unkeyed items."""
        for name in fulltext.FULLTEXT_INDEXES:
            for row in await self._query(fulltext.unkeyed_groups(name), {}, write=False):
                params = {"g": row["g"], "key": fulltext.group_key(row["g"])}
                while (await self._query(fulltext.key_page(name), params, write=True))[0]["n"]:
                    pass
        stale = [r["name"] for r in await self._query(fulltext.STALE_INDEXES, {}, write=False)]
        for name in stale:
            log.warning("rebuilding Neo4j full-text index %s with group keys", name)
            await self._ddl(f"DROP INDEX {name} IF EXISTS")
        for stmt in NEO4J_SCHEMA:
            if any(f"INDEX {name} " in stmt for name in stale):
                await self._ddl(stmt)
        if stale:
            self._indexes_online = False  # search waits for the new ones

    def _encode(self, model: BaseModel, *, drop: tuple[str, ...] = ()) -> dict[str, Any]:
        """Every indexed item carries its group's full-text key (kg.store.neo4j.fulltext)."""
        row = super()._encode(model, drop=drop)
        return fulltext.keyed(row) if isinstance(model, fulltext.KEYED_MODELS) else row

    async def _check_vector_dimension(self, dim: int) -> None:
        """One database has one vector index per label, of one dimension, for all its groups
        (FalkorDB has a graph, and indexes, per group). `IF NOT EXISTS` keeps an index of
        another dimension, and Neo4j would then leave this embedder's vectors out of it
        silently; so a second dimension in one database is refused, naming both."""
        rows = await self._query(
            "SHOW VECTOR INDEXES YIELD name, options WHERE name STARTS WITH 'kg_' "
            "RETURN name, options",
            {},
            write=False,
        )
        for row in rows:
            config = row["options"]["indexConfig"]
            if config.get("vector.quantization.enabled"):
                log.warning(
                    "Neo4j vector index %s is quantized (made by an older kg): its scores are "
                    "off by up to about 2e-3 in cosine; DROP INDEX %s and reopen kg to rebuild "
                    "it unquantized",
                    row["name"],
                    row["name"],
                )
            have = config["vector.dimensions"]
            if have != dim:
                raise InputError(
                    f"Neo4j database {self._database!r} has vector indexes of {have} "
                    f"dimensions ({row['name']}) and this embedder gives {dim}: one Neo4j "
                    "database holds one embedding dimension for all its groups; embed with "
                    f"a {have}-dimension model, or give these groups a database of their own "
                    "(bolt://host:port/DATABASE on Enterprise or Aura; see docs/production.md)"
                )

    async def _read(
        self, group_id: str, query: str, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        return await self._query(query, params, write=False)

    async def _query(
        self, query: str, params: dict[str, Any], *, write: bool
    ) -> list[dict[str, Any]]:
        """A read is one auto-commit query: one round trip (RUN and PULL pipelined), where a
        managed transaction (`execute_query`) costs two (BEGIN, RUN and PULL; then COMMIT).
        A read is safe to run again, so a retryable failure (a cluster's leader change, a
        transient error) is retried here, as the driver retries its managed transactions.
        Reads share the writes' bookmark manager: read-your-writes holds on a cluster."""
        import neo4j

        if write:
            try:
                records, _, _ = await self._driver.execute_query(
                    query, params, database_=self._database, routing_=neo4j.RoutingControl.WRITE
                )
            except Exception as exc:
                raise self._translate(exc) from exc
            return [dict(r) for r in records]
        for attempt in range(READ_ATTEMPTS):
            try:
                async with self._driver.session(
                    database=self._database,
                    default_access_mode=neo4j.READ_ACCESS,
                    bookmark_manager=self._driver.execute_query_bookmark_manager,
                ) as session:
                    result = await session.run(query, params)
                    return [dict(r) async for r in result]
            except Exception as exc:
                retry = getattr(exc, "is_retryable", None)
                if attempt + 1 < READ_ATTEMPTS and retry is not None and retry():
                    await asyncio.sleep(0.05 * 2**attempt)
                    continue
                raise self._translate(exc) from exc
        raise AssertionError("unreachable")

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
        """One query, one transaction: the plans' write, then (with `names`) the next
        planning read, which sees that write (a later clause sees an earlier one's writes)."""
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
        """`execute` as one query in one managed transaction: two round trips (BEGIN, RUN and
        PULL pipelined; COMMIT), however many statements. A check that fails leaves no row,
        and no row rolls the transaction back (see `write_query`)."""
        import neo4j

        await self.ensure_schema(group_id)
        write = write_query(group_id, statements, fence, guard, then)
        checked = fence is not None or guard is not None

        async def rows_or_refuse(result: Any) -> list[dict[str, Any]]:
            rows = [dict(r) async for r in result]
            if checked and not rows:
                raise _Refused  # inside the transaction: it rolls back
            return rows

        try:
            rows: list[dict[str, Any]] = await self._driver.execute_query(
                write.query,
                write.params,
                database_=self._database,
                routing_=neo4j.RoutingControl.WRITE,
                result_transformer_=rows_or_refuse,
            )
        except _Refused:
            if guard is not None and not await self._guard_holds(group_id, guard):
                raise LeaseLostError(guard.failure) from None
            assert fence is not None
            raise fence.conflict(group_id) from None
        except Exception as exc:
            raise self._translate(exc) from exc
        if fence is None:
            return None, rows
        return self._group_version(rows[0]), rows

    async def _guard_holds(self, group_id: str, guard: Guard) -> bool:
        """Whether a guard that just missed holds now: a lease once lost is never this
        owner's again, so a miss with the guard still holding was the version's."""
        query = f"{guard.match} RETURN 1 AS ok LIMIT 1"
        return bool(await self._read(group_id, query, {**guard.params, "group_id": group_id}))

    async def _queue_write(self, group_id: str, statement: Statement) -> list[dict[str, Any]]:
        await self.ensure_schema(group_id)
        lock = Statement(QUEUE_LOCK + " RETURN true AS ok", {"group_id": group_id})
        _, rows = await self._run_write([statement], [(lock, lambda row: None)])
        return rows

    async def raw_query(
        self,
        group_id: str,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        write: bool = False,
    ) -> list[dict[str, Any]]:
        return await self._query(query, params or {}, write=write)

    async def _run_write(
        self,
        statements: list[Statement],
        checks: Sequence[tuple[Statement, Callable[[dict[str, Any] | None], Any]]] = (),
    ) -> tuple[list[Any], list[dict[str, Any]]]:
        """Statements in one transaction, after `checks`: each check's statement runs first,
        in order, and its function sees that statement's first row (None if none), raising
        to roll the whole transaction back. What the checks returned; the last statement's rows."""

        async def work(tx: Any) -> tuple[list[Any], list[dict[str, Any]]]:
            seen: list[Any] = []
            for first, check in checks:
                result = await tx.run(first.query, first.params)
                record = await result.single()
                seen.append(check(dict(record) if record is not None else None))
            rows: list[dict[str, Any]] = []
            for s in statements:
                result = await tx.run(s.query, s.params)
                rows = [dict(r) async for r in result]
            return seen, rows

        try:
            # Writes share the bookmarks of execute_query's reads: on a cluster, the next read
            # (possibly on another member) waits for this write. Read-your-writes holds.
            async with self._driver.session(
                database=self._database,
                bookmark_manager=self._driver.execute_query_bookmark_manager,
            ) as session:
                done: tuple[list[Any], list[dict[str, Any]]] = await session.execute_write(work)
        except (LeaseLostError, WriteConflictError):
            raise
        except Exception as exc:
            raise self._translate(exc) from exc
        return done

    @staticmethod
    def _translate(exc: Exception) -> Exception:
        from neo4j.exceptions import Neo4jError, ServiceUnavailable, SessionExpired

        if isinstance(exc, ServiceUnavailable | SessionExpired | OSError):
            return StoreUnavailableError(f"lost the Neo4j server: {exc}")
        if isinstance(exc, Neo4jError):
            return StoreError(f"Neo4j refused the query (nothing written): {exc}")
        if isinstance(exc, UnicodeEncodeError):  # a lone surrogate: not encodable as UTF-8
            return StoreError(f"Neo4j cannot be sent this text (nothing written): {exc.reason}")
        return exc

    async def _vector_rows(
        self,
        group_id: str,
        scope: Scope,
        vector: list[float],
        view: SearchView,
        limit: int,
        *,
        full: bool,
    ) -> list[tuple[float, Any]]:
        """A small group's items: the shared index's first answer when it is complete (a group
        alone or most of the index), else its answer to a k widened by the group's share,
        else exact cosine over the group's own; a large group's through the widening index
        (see kg.store.neo4j.cosine)."""
        items = await self._counted(group_id, scope)
        if not exact_pays(items):
            return await super()._vector_rows(group_id, scope, vector, view, limit, full=full)
        await self._search_ready(group_id, scope)
        params = {**self._view_params(group_id, view), "v": vector, "k": first_k(limit)}
        cypher = self._vector_query(scope, view, self.dialect.vector_call(scope), full=full)
        rows = await self._read(group_id, cypher, params)
        hits = [r for r in rows if r["ok"]]
        wider = index_k(limit, items, await self._counted(None, scope))
        if not index_answer_complete(len(hits), len(rows), limit, params["k"]) and (
            wider > params["k"]
        ):  # beside larger groups: once more, with k over the group's share
            params = {**params, "k": wider}
            rows = await self._read(group_id, cypher, params)
            hits = [r for r in rows if r["ok"]]
        if not index_answer_complete(len(hits), len(rows), limit, params["k"]):
            cypher = exact_query(scope, view, self._vector_row(scope, full=full))
            rows = await self._read(group_id, cypher, {**params, "k": limit})
            hits = [r for r in rows if r["ok"]]
        out = [(self.dialect.similarity(float(r["score"])), r["row"]) for r in hits]
        out.sort(key=lambda sr: -sr[0])
        return out[:limit]

    async def _counted(self, group_id: str | None, scope: Scope) -> int:
        """The group's items of `scope` (up to just past EXACT_COSINE_MAX), or with None the
        database's: counted once a minute at most (a group grows by writes, and any answer
        is right, only slower)."""
        now = time.monotonic()
        known = self._sizes.get((group_id, scope))
        if known is None or now - known[1] > SIZE_TTL_SECONDS:
            if group_id is None:
                rows = await self._read("", total_query(scope), {})
            else:
                cap = cosine.EXACT_COSINE_MAX + 1
                params = {"group_id": group_id, "cap": cap}
                rows = await self._read(group_id, size_query(scope), params)
            known = (int(rows[0]["n"]) if rows else 0, now)
            self._sizes[(group_id, scope)] = known
        return known[0]

    async def _search_ready(self, group_id: str, scope: Scope | None = None) -> None:
        """Neo4j populates new indexes in the background; wait once per store."""
        if self._indexes_online:
            return
        await self._read(group_id, "CALL db.awaitIndexes(300)", {})
        self._indexes_online = True

    async def drop_group(self, group_id: str) -> None:
        # The version node is locked first, so a writer of the group waits for the drop to
        # commit, then finds its version gone and plans again.
        await self._run_write(
            [
                Statement(
                    f"OPTIONAL MATCH (g:{GROUP_LABEL} {{group_id: $group_id}}) "
                    "SET g.kg_lock = true",
                    {"group_id": group_id},
                ),
                Statement(
                    "MATCH (n) WHERE n.group_id = $group_id DETACH DELETE n", {"group_id": group_id}
                ),
            ]
        )

    async def compact(self) -> str:
        """Neo4j cannot scrub its files online (benchmarks/neo4j_erasure_residue.py, on 5.26
        Community: after the delete and a checkpoint the erased name is in the transaction
        log, the string store, full-text segments and a range index; pruning the logs removes
        it from them only). Say so."""
        return NEO4J_RESIDUE

    async def pending_erasures(self) -> list[PendingErasure]:
        rows = await self._read(
            "", "MATCH (p:PendingErasure) RETURN p.record AS record ORDER BY p.uuid", {}
        )
        return sorted(
            (PendingErasure.model_validate_json(r["record"]) for r in rows),
            key=lambda p: (p.created_at, p.uuid),
        )

    async def record_erasure(self, erasure: PendingErasure) -> None:
        # No group_id property: dropping the group (a delete by group_id) must not take it.
        await self._run_write(
            [
                Statement(
                    "MERGE (p:PendingErasure {uuid: $uuid}) SET p.record = $record",
                    {"uuid": erasure.uuid, "record": erasure.model_dump_json()},
                )
            ]
        )

    async def clear_erasure(self, uuid: str) -> None:
        await self._run_write(
            [Statement("MATCH (p:PendingErasure {uuid: $uuid}) DELETE p", {"uuid": uuid})]
        )

    async def load_staged(self, group_id: str, staging: str, items: Sequence[Record]) -> None:
        # One database for all groups: the staging id is the records' group_id until publish.
        moved = [
            x.model_copy(update={"group_id": staging}) if hasattr(x, "group_id") else x
            for x in items
        ]
        await self.load(staging, moved)

    async def publish_staged(self, group_id: str, staging: str) -> None:
        """Every node and relationship of the staging id takes the group's id, in one
        transaction."""
        if await self.has_group(group_id):
            raise WriteConflictError(
                f"group {group_id!r} was created while the import ran; nothing was imported"
            )
        params = {"staging": staging, "group_id": group_id, "key": fulltext.group_key(group_id)}
        try:
            await self._run_write(
                [
                    Statement(
                        "MATCH (n) WHERE n.group_id = $staging SET n.group_id = $group_id, "
                        f"{_REKEY.format(x='n')}",
                        params,
                    ),
                    Statement(
                        "MATCH ()-[r]->() WHERE r.group_id = $staging SET r.group_id = $group_id, "
                        f"{_REKEY.format(x='r')}",
                        params,
                    ),
                ]
            )
        except StoreError as exc:
            # A first write that landed after the check above created the group's version
            # node; the staging's own one cannot take the same group_id (a unique
            # constraint), so the transaction is refused whole: the same refusal as the check.
            if "ConstraintValidationFailed" in str(exc) and GROUP_LABEL in str(exc):
                raise WriteConflictError(
                    f"group {group_id!r} was created while the import ran; nothing was imported"
                ) from exc
            raise

    async def drop_staged(self, staging: str) -> None:
        if not is_staging(staging):
            raise StoreError(f"{staging!r} is not a staging id")
        await self.drop_group(staging)

    async def staged(self, group_id: str) -> list[str]:
        rows = await self._read(
            "",
            "MATCH (n) WHERE n.group_id STARTS WITH $prefix RETURN DISTINCT n.group_id AS g",
            {"prefix": staging_name(group_id, "")},
        )
        return sorted(r["g"] for r in rows)

    async def groups(self) -> list[str]:
        # Every group has episodes (each write plan and import adds one, and so does
        # graphiti-core): a scan of the episodes' group index, not of every node.
        rows = await self._read(
            "",
            "MATCH (ep:Episodic) WHERE ep.group_id IS NOT NULL "
            "RETURN DISTINCT ep.group_id AS g ORDER BY g",
            {},
        )
        return [r["g"] for r in rows if not is_staging(r["g"])]

    async def has_group(self, group_id: str) -> bool:
        rows = await self._read(
            group_id,
            "MATCH (ep:Episodic) WHERE ep.group_id = $group_id RETURN ep.uuid AS u LIMIT 1",
            {"group_id": group_id},
        )
        return bool(rows)

    async def close(self) -> None:
        await self._driver.close()


# A published item's full-text key is its new group's (items without one stay without).
_REKEY = "{x}.group_key = CASE WHEN {x}.group_key IS NULL THEN null ELSE $key END"


class _Refused(Exception):
    """A write's check matched nothing: its transaction rolls back."""


def merged_params(statements: Sequence[Statement], **given: Any) -> dict[str, Any]:
    """One parameter map for statements run as one query; two that name one parameter must
    give it one value."""
    params: dict[str, Any] = dict(given)
    for s in statements:
        for k, v in s.params.items():
            if k in params and params[k] != v:
                raise StoreError(f"plan statements disagree on parameter ${k}")
            params[k] = v
    return params


def write_query(
    group_id: str,
    statements: Sequence[Statement],
    fence: Fence | None,
    guard: Guard | None,
    then: Statement | None = None,
) -> Statement:
    """Statements as one query: each a CALL {} subquery, in order (a later one sees what an
    earlier one wrote), after the checks. The lease (`guard`) comes first, under the group's
    queue lock (which a write that changes queue records, `fence.queue`, takes too), then the
    version (`fence`): the group node is write-locked (setting a
    property takes its lock, held to commit) before its version is read, so two writers
    cannot read the same version (Neo4j reads at read-committed), and only a version equal
    to the plan's leaves a row for the rest to run on. Lock order is always KGQueue, KGGroup.
    With `then` (a fenced write), a read after the writes: its rows (columns kind, p, source
    and target) and one more row, with kind null, standing for the write itself."""
    extra = [Statement("", fence.params() if fence else {})]
    extra += [Statement("", guard.params)] if guard else []
    extra += [then] if then else []
    checked = fence is not None or guard is not None
    params = merged_params([*statements, *extra], **({"group_id": group_id} if checked else {}))
    calls = "".join(f" CALL {{ {s.query} }}" for s in statements)
    head = ""
    if guard is not None:
        head = f"{QUEUE_LOCK} WITH kg_lock {guard.match} WITH kg_guard LIMIT 1 "
    elif fence is not None and fence.queue:  # it changes queue records: the same lock first
        head = f"{QUEUE_LOCK} WITH kg_lock LIMIT 1 "
    if fence is None:
        if not head and len(statements) == 1:
            return Statement(statements[0].query, params)
        return Statement(f"{head}{calls.strip()} RETURN 1 AS ok".strip(), params)
    check = ""
    if fence.checked:
        expected = fence.base.token if fence.base is not None else None
        check = "WHERE kg_was = $kg_expected " if expected is not None else "WHERE kg_was IS NULL "
    query = (
        f"{head}MERGE (kg_g:{GROUP_LABEL} {{group_id: $group_id}}) SET kg_g.kg_lock = true "
        f"WITH kg_g, kg_g.version AS kg_was {check}"
        f"SET {fence.assignments('kg_g')} REMOVE kg_g.kg_lock WITH kg_g{calls}"
    )
    ret = " RETURN kg_g.version AS token, kg_g.writes AS writes, kg_g.tx AS tx, kg_g.hold AS hold"
    if then is not None:
        query += (
            f" WITH kg_g CALL {{ {then.query} UNION ALL RETURN null AS kind, "
            "null AS p, null AS source, null AS target }"
        )
        ret += ", kind, p, source, target"
    return Statement(query + ret, params)
