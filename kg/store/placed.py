"""A deployment on several store servers: groups placed on named stores by a table kept in
one of them (the directory), behind the one `GraphStore` contract.

`KG_STORES` names the stores (`a=embedded:/srv/kg-a,b=falkordb://h:6379,c=bolt://h:7687`) and
`KG_PLACEMENT` the directory among them. A `PlacedStore` hands each call about one group to
the store its group is placed on; the few calls about no one group (`groups`, `keys`,
`pending_erasures`, `queued_groups`, `compact`, `close`) ask every store and merge. The
facade, ingest and retrieval see one store.

A group with no row is on the default store (the first one named); its first write places it
there (`MERGE`: two processes placing one new group agree). Each process caches where a
group is, and reads the row again when the store it asked says the group is held or absent
(a version with a hold or without a token, `has_group` false, an empty answer): that is how
a process with a stale cache finds a group that `kg placement move` moved (kg.placement).
See docs/design-decisions.md, "Groups placed on several store servers".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar

from kg.errors import InputError
from kg.schemas.embedder import EmbeddingModel
from kg.schemas.graph import AuditEvent, EntityNode, EpisodicNode, Fact, FactEdge
from kg.schemas.keys import ApiKeyRecord
from kg.schemas.metrics import ApiMetrics, IngestMetrics, QueryMetrics, QueueMetrics
from kg.schemas.plan import CommunityPlan, GroupVersion, RewritePlan, WritePlan
from kg.schemas.search import Scope, Scored, SearchItem, SearchView
from kg.schemas.store import (
    STAGING_PREFIX,
    Community,
    EntitySummary,
    FactQuery,
    GraphStore,
    PageAfter,
    Patchable,
    PendingErasure,
    PlacementTable,
    PlanningNames,
    PlanningReads,
    Record,
    RecordKind,
    StoreStats,
    TimelineKey,
)
from kg.schemas.validation import UtcDatetime

T = TypeVar("T")


class Backend(GraphStore, PlacementTable, Protocol):
    """A store a deployment places groups on: any kg backend (each can be the directory)."""


def parse_stores(spec: str) -> dict[str, str]:
    """`KG_STORES` (`name=uri,name=uri`) as {name: uri}, in the order given; `embedded:PATH`
    is an embedded store in that data directory. A one-line error for a malformed list."""
    stores: dict[str, str] = {}
    for part in spec.split(","):
        name, eq, uri = part.strip().partition("=")
        name, uri = name.strip(), uri.strip()
        if not eq or not name or not uri:
            raise InputError(f"KG_STORES: {part.strip()!r} is not NAME=URI")
        if not name.replace("-", "").replace("_", "").isalnum():
            raise InputError(f"KG_STORES: store name {name!r}: letters, digits, '-', '_' only")
        if name in stores:
            raise InputError(f"KG_STORES: store {name!r} is named twice")
        stores[name] = uri
    return stores


def _empty(result: object) -> bool:
    """Whether an answer may mean the group is not (or no longer) on the store asked."""
    if isinstance(result, GroupVersion):
        return result.token is None or result.hold is not None
    return result is None or result is False or result == [] or result == {}


class PlacedStore:
    """The stores of a deployment as one `GraphStore` (see the module docstring)."""

    backend = "placed"

    def __init__(self, stores: dict[str, Backend], directory: str) -> None:
        if directory not in stores:
            known = ", ".join(stores)
            raise InputError(f"KG_PLACEMENT: no store {directory!r} in KG_STORES ({known})")
        self.stores = stores
        self.directory: PlacementTable = stores[directory]
        self.directory_name = directory
        self.default = next(iter(stores))  # where a group without a row is, and goes
        dims = {s.embedding_dim for s in stores.values()}
        self.embedding_dim: int | None = dims.pop() if len(dims) == 1 else None
        self._where: dict[str, tuple[str, bool]] = {}  # group -> (store, has a row)

    async def where(self, group_id: str, *, reread: bool = False) -> tuple[str, bool]:
        """The store the group is on, and whether its row was read now (not cached)."""
        cached = self._where.get(group_id)
        if cached is not None and not reread:
            return cached[0], False
        row = await self.directory.placement(group_id)
        self._where[group_id] = (row.store, True) if row else (self.default, False)
        if row is not None and row.store not in self.stores:
            raise InputError(
                f"group {group_id!r} is placed on store {row.store!r}, which KG_STORES does "
                f"not name ({', '.join(self.stores)})"
            )
        return self._where[group_id][0], True

    @property
    def owner_pid(self) -> int | None:
        """The kg process whose embedded server a store of these is shared through, if any
        (`attach`; see FalkorDBStore): the facade and the CLI treat the deployment as shared."""
        pids = [getattr(s, "owner_pid", None) for s in self.stores.values()]
        return next((p for p in pids if p is not None), None)

    @property
    def owner(self) -> str | None:
        owners = [getattr(s, "owner", None) for s in self.stores.values()]
        return next((o for o in owners if o is not None), None)

    def owner_alive(self) -> bool:
        """Whether every kg process whose embedded server is shared here still runs."""
        return all(getattr(s, "owner_alive", lambda: True)() for s in self.stores.values())

    def forget(self, group_id: str) -> None:
        """Read the group's row again at its next call (this process moved it)."""
        self._where.pop(group_id, None)

    async def _read(self, group_id: str, call: Callable[[Backend], Awaitable[T]]) -> T:
        """`call` on the group's store; an answer that may mean 'not here' from a cached
        placement reads the row again, and asks the store it names if that is another."""
        name, fresh = await self.where(group_id)
        result = await call(self.stores[name])
        if fresh or not _empty(result):
            return result
        again, _ = await self.where(group_id, reread=True)
        return result if again == name else await call(self.stores[again])

    async def _to(self, group_id: str, call: Callable[[Backend], Awaitable[T]]) -> T:
        """`call` on the group's store, as cached (answers that say nothing of the group)."""
        name, _ = await self.where(group_id)
        return await call(self.stores[name])

    async def _write(self, group_id: str, call: Callable[[Backend], Awaitable[T]]) -> T:
        """`call` on the group's store, the group placed first if it has no row yet."""
        await self.where(group_id)
        name, placed = self._where[group_id]
        if not placed:
            row = await self.directory.place(group_id, name)
            self._where[group_id] = (name := row.store, True)
        return await call(self.stores[name])

    async def _all(self, call: Callable[[Backend], Awaitable[T]]) -> list[T]:
        return [await call(s) for s in self.stores.values()]

    # -- the calls about one group that need more than routing ------------------------------

    async def version(self, group_id: str) -> GroupVersion:
        return await self._read(group_id, lambda s: s.version(group_id))

    async def has_group(self, group_id: str) -> bool:
        return await self._read(group_id, lambda s: s.has_group(group_id))

    async def drop_group(self, group_id: str) -> None:
        """Drop the group where it is placed (a move drops the source copy itself)."""
        await self._to(group_id, lambda s: s.drop_group(group_id))

    async def drop_staged(self, staging: str) -> None:
        group = staging.removeprefix(STAGING_PREFIX).split(":", 1)[0]
        await self._to(group, lambda s: s.drop_staged(staging))

    # -- the calls about no one group: every store, merged ----------------------------------

    async def groups(self) -> list[str]:
        return sorted({g for gs in await self._all(lambda s: s.groups()) for g in gs})

    async def queued_groups(self, groups: Sequence[str]) -> list[str]:
        found = await self._all(lambda s: s.queued_groups(groups))
        return sorted({g for gs in found for g in gs})

    async def compact(self) -> str | None:
        notes = [n for n in await self._all(lambda s: s.compact()) if n]
        return "; ".join(notes) or None

    async def close(self) -> None:
        """Close every store, even after one fails to close (the first failure is raised)."""
        failed: BaseException | None = None
        for s in self.stores.values():
            try:
                await s.close()
            except BaseException as exc:  # the others still need closing
                failed = failed or exc
        if failed is not None:
            raise failed

    async def put_key(self, record: ApiKeyRecord) -> None:
        """Keys live in the directory store: every process of the deployment reads it."""
        await self.stores[self.directory_name].put_key(record)

    async def key(self, key_id: str) -> ApiKeyRecord | None:
        for s in (self.stores[self.directory_name], *self.stores.values()):
            if (found := await s.key(key_id)) is not None:
                return found
        return None

    async def keys(self) -> list[ApiKeyRecord]:
        merged = {k.key_id: k for ks in reversed(await self._all(lambda s: s.keys())) for k in ks}
        return sorted(merged.values(), key=lambda k: (k.created_at, k.key_id))

    async def revoke_key(self, key_id: str, at: UtcDatetime) -> ApiKeyRecord | None:
        revoked = [r for r in await self._all(lambda s: s.revoke_key(key_id, at)) if r]
        return revoked[0] if revoked else None

    async def pending_erasures(self) -> list[PendingErasure]:
        found = {p.uuid: p for ps in await self._all(lambda s: s.pending_erasures()) for p in ps}
        return sorted(found.values(), key=lambda p: (p.created_at, p.uuid))

    async def clear_erasure(self, uuid: str) -> None:
        await self._all(lambda s: s.clear_erasure(uuid))

    # -- the calls about one group, routed (`_write`: the ones that may create the group) ---
    # -- EpisodeLog -------------------------------------------------------------------------
    async def episode_by_hash(self, group_id: str, content_hash: str) -> EpisodicNode | None:
        return await self._read(group_id, lambda s: s.episode_by_hash(group_id, content_hash))

    async def episodes(self, group_id: str, uuids: list[str]) -> list[EpisodicNode]:
        return await self._read(group_id, lambda s: s.episodes(group_id, uuids))

    async def find_episodes(
        self,
        group_id: str,
        source_description: str | None,
        since: UtcDatetime | None,
        *,
        include_rolled_back: bool = False,
    ) -> list[EpisodicNode]:
        return await self._read(
            group_id,
            lambda s: s.find_episodes(
                group_id, source_description, since, include_rolled_back=include_rolled_back
            ),
        )

    async def episode_page(
        self,
        group_id: str,
        limit: int,
        after: PageAfter | None = None,
        *,
        quarantined: bool = False,
    ) -> list[EpisodicNode]:
        return await self._read(
            group_id, lambda s: s.episode_page(group_id, limit, after, quarantined=quarantined)
        )

    async def recent_episodes(self, group_id: str, limit: int) -> list[EpisodicNode]:
        return await self._read(group_id, lambda s: s.recent_episodes(group_id, limit))

    async def episodes_mentioning(self, group_id: str, entity_uuid: str) -> list[EpisodicNode]:
        return await self._read(group_id, lambda s: s.episodes_mentioning(group_id, entity_uuid))

    async def turn_before(self, group_id: str, episode: EpisodicNode) -> EpisodicNode | None:
        return await self._read(group_id, lambda s: s.turn_before(group_id, episode))

    async def session_turns(self, group_id: str, session_id: str) -> list[EpisodicNode]:
        return await self._read(group_id, lambda s: s.session_turns(group_id, session_id))

    async def audit_log(self, group_id: str, limit: int) -> list[AuditEvent]:
        return await self._read(group_id, lambda s: s.audit_log(group_id, limit))

    # -- Timelines --------------------------------------------------------------------------
    async def entities_by_key(self, group_id: str, name_keys: list[str]) -> list[EntityNode]:
        return await self._read(group_id, lambda s: s.entities_by_key(group_id, name_keys))

    async def live_edges(self, group_id: str, keys: list[TimelineKey]) -> list[FactEdge]:
        return await self._read(group_id, lambda s: s.live_edges(group_id, keys))

    async def timeline_versions(self, group_id: str, keys: list[TimelineKey]) -> list[FactEdge]:
        return await self._read(group_id, lambda s: s.timeline_versions(group_id, keys))

    # -- PlanningRead -----------------------------------------------------------------------
    async def planning_reads(self, group_id: str, names: PlanningNames) -> PlanningReads:
        return await self._read(group_id, lambda s: s.planning_reads(group_id, names))

    async def apply_many(
        self, plans: list[WritePlan], names: PlanningNames | None
    ) -> tuple[GroupVersion, PlanningReads | None]:
        return await self._write(plans[0].group_id, lambda s: s.apply_many(plans, names))

    # -- FactReader -------------------------------------------------------------------------
    async def facts(self, query: FactQuery) -> list[Fact]:
        return await self._read(query.group_id, lambda s: s.facts(query))

    async def history(
        self,
        group_id: str,
        subject_key: str | None,
        predicate: str | None,
        object_key: str | None,
        limit: int,
    ) -> list[Fact]:
        return await self._read(
            group_id, lambda s: s.history(group_id, subject_key, predicate, object_key, limit)
        )

    async def entities(self, group_id: str, contains: str, limit: int) -> list[EntitySummary]:
        return await self._read(group_id, lambda s: s.entities(group_id, contains, limit))

    async def fact_versions(self, group_id: str, uuid: str) -> list[Fact]:
        return await self._read(group_id, lambda s: s.fact_versions(group_id, uuid))

    async def ids_by_prefix(
        self, group_id: str, kind: Literal["episode", "fact"], prefix: str, limit: int
    ) -> list[str]:
        return await self._read(group_id, lambda s: s.ids_by_prefix(group_id, kind, prefix, limit))

    async def closures(self, group_id: str, limit: int) -> list[Fact]:
        return await self._read(group_id, lambda s: s.closures(group_id, limit))

    async def contested(self, group_id: str, limit: int) -> list[Fact]:
        return await self._read(group_id, lambda s: s.contested(group_id, limit))

    async def stats(self, group_id: str, now: UtcDatetime) -> StoreStats:
        return await self._read(group_id, lambda s: s.stats(group_id, now))

    async def communities(self, group_id: str, having: list[str] | None = None) -> list[Community]:
        return await self._read(group_id, lambda s: s.communities(group_id, having))

    # -- PlanWriter -------------------------------------------------------------------------
    async def apply(self, plan: WritePlan) -> GroupVersion:
        return await self._write(plan.group_id, lambda s: s.apply(plan))

    async def rewrite(self, plan: RewritePlan) -> GroupVersion:
        return await self._write(plan.group_id, lambda s: s.rewrite(plan))

    async def write_communities(self, plan: CommunityPlan) -> GroupVersion:
        return await self._write(plan.group_id, lambda s: s.write_communities(plan))

    async def set_hold(
        self, group_id: str, base: GroupVersion | None, hold: str | None
    ) -> GroupVersion:
        return await self._write(group_id, lambda s: s.set_hold(group_id, base, hold))

    # -- SearchIndex ------------------------------------------------------------------------
    async def search_text(
        self, group_id: str, scope: Scope, query: str, view: SearchView, limit: int
    ) -> list[Scored]:
        return await self._read(
            group_id, lambda s: s.search_text(group_id, scope, query, view, limit)
        )

    async def search_vector(
        self, group_id: str, scope: Scope, vector: list[float], view: SearchView, limit: int
    ) -> list[Scored]:
        return await self._read(
            group_id, lambda s: s.search_vector(group_id, scope, vector, view, limit)
        )

    async def rank_text(
        self, group_id: str, scope: Scope, query: str, view: SearchView, limit: int
    ) -> list[tuple[str, float]]:
        return await self._read(
            group_id, lambda s: s.rank_text(group_id, scope, query, view, limit)
        )

    async def rank_vector(
        self, group_id: str, scope: Scope, vector: list[float], view: SearchView, limit: int
    ) -> list[tuple[str, float]]:
        return await self._read(
            group_id, lambda s: s.rank_vector(group_id, scope, vector, view, limit)
        )

    async def text_ceiling(self, group_id: str, scope: Scope, query: str) -> float | None:
        return await self._read(group_id, lambda s: s.text_ceiling(group_id, scope, query))

    async def items(self, group_id: str, scope: Scope, uuids: list[str]) -> list[SearchItem]:
        return await self._read(group_id, lambda s: s.items(group_id, scope, uuids))

    async def turn_neighbours(
        self, group_id: str, uuids: list[str], view: SearchView
    ) -> dict[str, list[str]]:
        return await self._read(group_id, lambda s: s.turn_neighbours(group_id, uuids, view))

    async def neighbourhood(
        self, group_id: str, entity_uuids: list[str], view: SearchView, limit: int
    ) -> list[Fact]:
        return await self._read(
            group_id, lambda s: s.neighbourhood(group_id, entity_uuids, view, limit)
        )

    async def facts_between(
        self, group_id: str, pairs: list[tuple[str, str]], view: SearchView, limit: int
    ) -> list[Fact]:
        return await self._read(group_id, lambda s: s.facts_between(group_id, pairs, view, limit))

    async def episodes_mentioning_any(
        self, group_id: str, entity_uuids: list[str], view: SearchView, limit: int
    ) -> list[Scored]:
        return await self._read(
            group_id, lambda s: s.episodes_mentioning_any(group_id, entity_uuids, view, limit)
        )

    async def entities_by_uuid(self, group_id: str, uuids: list[str]) -> list[EntityNode]:
        return await self._read(group_id, lambda s: s.entities_by_uuid(group_id, uuids))

    async def mention_counts(self, group_id: str, entity_uuids: list[str]) -> dict[str, int]:
        return await self._read(group_id, lambda s: s.mention_counts(group_id, entity_uuids))

    async def embeddings(
        self, group_id: str, scope: Scope, uuids: list[str]
    ) -> dict[str, list[float]]:
        return await self._read(group_id, lambda s: s.embeddings(group_id, scope, uuids))

    # -- MetricsStore -----------------------------------------------------------------------
    async def ingest_metrics(self, group_id: str) -> IngestMetrics:
        return await self._read(group_id, lambda s: s.ingest_metrics(group_id))

    async def query_metrics(self, group_id: str) -> QueryMetrics:
        return await self._read(group_id, lambda s: s.query_metrics(group_id))

    async def record_query_metrics(self, group_id: str, metrics: QueryMetrics) -> None:
        return await self._to(group_id, lambda s: s.record_query_metrics(group_id, metrics))

    async def api_metrics(self, group_id: str) -> ApiMetrics:
        return await self._read(group_id, lambda s: s.api_metrics(group_id))

    async def record_api_metrics(self, group_id: str, metrics: ApiMetrics) -> None:
        return await self._to(group_id, lambda s: s.record_api_metrics(group_id, metrics))

    # -- StoreAdmin -------------------------------------------------------------------------
    async def ensure_schema(self, group_id: str) -> None:
        return await self._to(group_id, lambda s: s.ensure_schema(group_id))

    async def raw_query(
        self,
        group_id: str,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        write: bool = False,
    ) -> list[dict[str, Any]]:
        return await self._to(group_id, lambda s: s.raw_query(group_id, query, params, write=write))

    # -- RecordTransfer ---------------------------------------------------------------------
    async def dump_page(
        self, group_id: str, kind: RecordKind, after: str, limit: int
    ) -> list[dict[str, Any]]:
        return await self._read(group_id, lambda s: s.dump_page(group_id, kind, after, limit))

    async def patch(
        self, group_id: str, items: Sequence[Patchable], *, base: GroupVersion | None = None
    ) -> GroupVersion:
        return await self._write(group_id, lambda s: s.patch(group_id, items, base=base))

    async def load(
        self, group_id: str, items: Sequence[Record], *, base: GroupVersion | None = None
    ) -> GroupVersion:
        return await self._write(group_id, lambda s: s.load(group_id, items, base=base))

    # -- StagedImport -----------------------------------------------------------------------
    async def load_staged(self, group_id: str, staging: str, items: Sequence[Record]) -> None:
        return await self._write(group_id, lambda s: s.load_staged(group_id, staging, items))

    async def publish_staged(self, group_id: str, staging: str) -> None:
        return await self._write(group_id, lambda s: s.publish_staged(group_id, staging))

    async def staged(self, group_id: str) -> list[str]:
        return await self._read(group_id, lambda s: s.staged(group_id))

    # -- EmbeddingModels --------------------------------------------------------------------
    async def embedding_model(self, group_id: str) -> EmbeddingModel | None:
        return await self._read(group_id, lambda s: s.embedding_model(group_id))

    async def record_embedding_model(self, group_id: str, model: EmbeddingModel) -> EmbeddingModel:
        return await self._write(group_id, lambda s: s.record_embedding_model(group_id, model))

    # -- ErasureLog -------------------------------------------------------------------------
    async def record_erasure(self, erasure: PendingErasure) -> None:
        return await self._to(erasure.group_id, lambda s: s.record_erasure(erasure))

    # -- WorkQueue --------------------------------------------------------------------------
    async def enqueue(self, node: EpisodicNode) -> tuple[EpisodicNode, bool]:
        return await self._write(node.group_id, lambda s: s.enqueue(node))

    async def episode_by_key(
        self, group_id: str, content_hash: str, key: str | None
    ) -> EpisodicNode | None:
        return await self._read(group_id, lambda s: s.episode_by_key(group_id, content_hash, key))

    async def debounce(self, group_id: str, session_id: str, until: UtcDatetime) -> int:
        return await self._to(group_id, lambda s: s.debounce(group_id, session_id, until))

    async def ready(
        self, group_id: str, owner: str, now: UtcDatetime, limit: int
    ) -> tuple[list[EpisodicNode], bool]:
        return await self._read(group_id, lambda s: s.ready(group_id, owner, now, limit))

    async def claim(
        self, group_id: str, owner: str, uuids: list[str], now: UtcDatetime, until: UtcDatetime
    ) -> list[EpisodicNode]:
        return await self._to(group_id, lambda s: s.claim(group_id, owner, uuids, now, until))

    async def renew(
        self, group_id: str, owner: str, uuids: list[str], until: UtcDatetime
    ) -> set[str]:
        return await self._to(group_id, lambda s: s.renew(group_id, owner, uuids, until))

    async def stage(self, group_id: str, uuid: str, owner: str, staged: str) -> bool:
        return await self._to(group_id, lambda s: s.stage(group_id, uuid, owner, staged))

    async def release(
        self,
        group_id: str,
        uuid: str,
        owner: str,
        *,
        failed: bool,
        next_attempt_at: UtcDatetime | None = None,
        error: str | None = None,
        reason: str | None = None,
        llm_calls: int = 0,
        llm_tokens: int = 0,
        undo_attempt: bool = False,
    ) -> bool:
        return await self._to(
            group_id,
            lambda s: s.release(
                group_id,
                uuid,
                owner,
                failed=failed,
                next_attempt_at=next_attempt_at,
                error=error,
                reason=reason,
                llm_calls=llm_calls,
                llm_tokens=llm_tokens,
                undo_attempt=undo_attempt,
            ),
        )

    async def abandon(
        self, group_id: str, uuid: str, now: UtcDatetime, max_attempts: int, error: str
    ) -> bool:
        return await self._to(
            group_id, lambda s: s.abandon(group_id, uuid, now, max_attempts, error)
        )

    async def session_activity(self, group_id: str, sessions: list[str]) -> dict[str, datetime]:
        return await self._read(group_id, lambda s: s.session_activity(group_id, sessions))

    async def context_before(
        self, group_id: str, episode: EpisodicNode, limit: int
    ) -> list[EpisodicNode]:
        return await self._read(group_id, lambda s: s.context_before(group_id, episode, limit))

    async def queue_metrics(self, group_id: str, now: UtcDatetime) -> QueueMetrics:
        return await self._read(group_id, lambda s: s.queue_metrics(group_id, now))
