"""The store contract, split by role: each caller asks for the few methods it uses.

`GraphStore` is the union of the roles; backends (embedded FalkorDB, Neo4j) implement all of
it, and nothing above them writes Cypher. Planning code takes `Timelines`, search takes
`SearchIndex`, rollback `EpisodeLog` + `Timelines`, transfer `RecordTransfer` + `StoreAdmin`:
a fake for a test, or a new backend, implements only what the code under test calls.
Every method but `groups` is scoped to one group: there is no call that reads across groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from kg.schemas.embedder import EmbeddingModel
from kg.schemas.graph import AuditEvent, CommunityNode, EntityNode, EpisodicNode, Fact, FactEdge
from kg.schemas.keys import ApiKeyRecord
from kg.schemas.metrics import ApiMetrics, IngestMetrics, QueryMetrics, QueueMetrics
from kg.schemas.plan import (
    CommunityMembership,
    CommunityPlan,
    GroupVersion,
    RewritePlan,
    WritePlan,
)
from kg.schemas.search import Scope, Scored, SearchItem, SearchView
from kg.schemas.validation import GroupId, UtcDatetime


class FactQuery(BaseModel):
    """'What was true at `valid_at`, as we knew it at `known_at`', optionally narrowed."""

    group_id: GroupId
    valid_at: UtcDatetime
    known_at: UtcDatetime
    subject_key: str | None = None
    predicate: str | None = None
    object_key: str | None = None
    include_contested: bool = False
    limit: int = Field(default=1000, ge=1, le=100_000)


class TimelineKey(BaseModel):
    """Versions that compete for valid time: (source, predicate) for a single-valued predicate,
    (source, predicate, target) for a multi-valued one."""

    model_config = ConfigDict(frozen=True)

    source_uuid: str
    predicate: str
    target_uuid: str | None = None


class NamedTimeline(BaseModel):
    """A timeline named by its entities' name keys, before they resolve to uuids: what one
    fact of an episode can compete with (`object_key` only for a multi-valued predicate).
    `since`: the earliest valid time the episode's facts on it have; a version that ended
    by then and started before it cannot hold at, nor start after, any of them, so it is
    not read (a long history costs nothing to an episode about the present)."""

    model_config = ConfigDict(frozen=True)

    subject_key: str
    predicate: str
    object_key: str | None = None
    since: UtcDatetime


class PlanningNames(BaseModel):
    """What the planning read of one or more structured episodes is asked for: their
    duplicates (by content hash and idempotency key), their entity names and their named
    timelines."""

    model_config = ConfigDict(frozen=True)

    content_hashes: tuple[str, ...]
    idempotency_keys: tuple[str, ...] = ()
    name_keys: tuple[str, ...]
    timelines: tuple[NamedTimeline, ...]


class PlanningReads(BaseModel):
    """Everything planning a structured episode reads, read in one round trip (one snapshot on
    FalkorDB): the episodes it would duplicate, every entity with one of its names, the live
    versions on the timelines its facts name, and whether the group has communities."""

    episodes: list[EpisodicNode] = Field(description="Same content hash or idempotency key.")
    entities: list[EntityNode] = Field(description="In (created_at, uuid) order.")
    edges: list[FactEdge] = Field(
        description="Unretired versions on the named timelines, from their `since` on."
    )
    communities: bool


class Community(BaseModel):
    """A community as read back: the node and its members' uuids."""

    node: CommunityNode
    members: list[str]


class StoreStats(BaseModel):
    group_id: str
    episodes: int
    entities: int
    edge_versions: int
    current_facts: int = Field(description="Versions still believed and true now.")
    contested_facts: int
    communities: int = 0


class EntitySummary(BaseModel):
    """An entity and how many fact versions it is the subject or the object of: enough to
    pick a subject to look at."""

    entity: EntityNode
    as_subject: int = Field(description="Fact versions (every version) with it as subject.")
    as_object: int = Field(description="Fact versions with it as object.")


class Mention(BaseModel):
    """An episode's MENTIONS edge to an entity, as exported and imported."""

    uuid: str
    episode: str
    entity: str
    created_at: datetime


class PendingErasure(BaseModel):
    """An erasure in progress, recorded durably before anything is deleted and removed once
    the files are compacted, so that a crash in between is finished on the next open or
    re-run. It holds no erased text: the subject as a uuid (gone once deleted) and a hash of
    its name key salted with this record's uuid (how a re-run by name finds it)."""

    uuid: str
    group_id: GroupId
    kind: Literal["entity", "group"]
    created_at: UtcDatetime
    entity_uuid: str | None = None
    subject_hash: str | None = None
    deleted: bool = Field(default=False, description="The graph delete is done (counts final).")
    episodes_deleted: int = 0
    entities_deleted: int = 0
    fact_versions_deleted: int = 0
    other_facts_recomputed: int = 0
    communities_deleted: int = 0
    queue_records_deleted: int = 0
    redacted_copies: int = 0
    episode_uuids: list[str] = Field(
        default_factory=list,
        description="The episodes to delete, until they are: what "
        "finishing the erasure without its subject's name can still find.",
    )


class RecordKind(StrEnum):
    """The kinds of record an export holds, in load order: what a record refers to is always
    loaded before it."""

    entities = "entities"
    episodes = "episodes"
    edges = "edges"
    mentions = "mentions"
    communities = "communities"
    members = "members"
    audit = "audit"


RECORD_MODELS: dict[RecordKind, type[BaseModel]] = {
    RecordKind.entities: EntityNode,
    RecordKind.episodes: EpisodicNode,
    RecordKind.edges: FactEdge,
    RecordKind.mentions: Mention,
    RecordKind.communities: CommunityNode,
    RecordKind.members: CommunityMembership,
    RecordKind.audit: AuditEvent,
}
Record = (
    EntityNode
    | EpisodicNode
    | FactEdge
    | Mention
    | CommunityNode
    | CommunityMembership
    | AuditEvent
)
Patchable = EntityNode | EpisodicNode | FactEdge


def record_kind(item: Record) -> RecordKind:
    """The kind of a record, from its model."""
    for kind, model in RECORD_MODELS.items():
        if type(item) is model:
            return kind
    raise TypeError(f"{type(item).__name__} is not a record kind")


class PageAfter(BaseModel):
    """Where a page of a list ordered newest first ends: the last row's time and uuid. The
    next page starts strictly after it, so pages neither skip nor repeat a row that stayed."""

    model_config = ConfigDict(frozen=True)

    created_at: UtcDatetime
    uuid: str = Field(max_length=200)


class EpisodeLog(Protocol):
    """The episodes a group ingested (and rolled back, or failed), and its audit trail."""

    async def episode_by_hash(self, group_id: str, content_hash: str) -> EpisodicNode | None: ...

    async def episodes(self, group_id: str, uuids: list[str]) -> list[EpisodicNode]: ...

    async def find_episodes(
        self,
        group_id: str,
        source_description: str | None,
        since: UtcDatetime | None,
        *,
        include_rolled_back: bool = False,
    ) -> list[EpisodicNode]:
        """Episodes oldest first, optionally narrowed; rolled-back ones only when asked."""
        ...

    async def episode_page(
        self,
        group_id: str,
        limit: int,
        after: PageAfter | None = None,
        *,
        quarantined: bool = False,
    ) -> list[EpisodicNode]:
        """Up to `limit` episodes of every status, newest first (created_at, then uuid, both
        descending: a stable order), after `after`; only the page is read. `quarantined`:
        only episodes holding something the instruction guard held back."""
        ...

    async def recent_episodes(self, group_id: str, limit: int) -> list[EpisodicNode]:
        """The group's latest ingested episodes, oldest first: context for extraction."""
        ...

    async def episodes_mentioning(self, group_id: str, entity_uuid: str) -> list[EpisodicNode]: ...

    async def turn_before(self, group_id: str, episode: EpisodicNode) -> EpisodicNode | None:
        """The searchable episode just before this one in its session (reference time, then
        arrival; ingested, queued or processing; not structured): the context of its key."""
        ...

    async def session_turns(self, group_id: str, session_id: str) -> list[EpisodicNode]:
        """The session's searchable episodes in that order (rekeying after a removal)."""
        ...

    async def audit_log(self, group_id: str, limit: int) -> list[AuditEvent]: ...


class Timelines(Protocol):
    """What a write plan is computed from: entities by name and the versions competing on a
    timeline. Planning (ingest, replay, rollback) reads only this."""

    async def entities_by_key(self, group_id: str, name_keys: list[str]) -> list[EntityNode]: ...

    async def live_edges(self, group_id: str, keys: list[TimelineKey]) -> list[FactEdge]:
        """Versions not yet retired (expired_at null) on the given timelines."""
        ...

    async def timeline_versions(self, group_id: str, keys: list[TimelineKey]) -> list[FactEdge]:
        """Every version on the given timelines, retired ones included."""
        ...


class PlanningRead(Protocol):
    """The one read a structured episode's plan is made from (see `PlanningReads`)."""

    async def planning_reads(self, group_id: str, names: PlanningNames) -> PlanningReads: ...

    async def apply_many(
        self, plans: list[WritePlan], names: PlanningNames | None
    ) -> tuple[GroupVersion, PlanningReads | None]:
        """One or more plans of one group (none under a lease), each made against the graph
        the ones before it leave, written in order as one atomic unit checked at the first
        one's `base`: the graph those writes one by one would give. Then, with `names`, the
        planning read of the group's next episode: made after the write (inside it, where
        the backend can: no round trip of its own), so it stands at the version returned, or
        at a later one (which its write's check then refuses)."""
        ...


class FactReader(Protocol):
    """Bi-temporal reads for users: facts as of a time, their history and provenance."""

    async def facts(self, query: FactQuery) -> list[Fact]: ...

    async def history(
        self,
        group_id: str,
        subject_key: str | None,
        predicate: str | None,
        object_key: str | None,
        limit: int,
    ) -> list[Fact]:
        """Every version, retired ones included, ordered by valid time then transaction time."""
        ...

    async def entities(self, group_id: str, contains: str, limit: int) -> list[EntitySummary]:
        """Entities whose `name_key` contains `contains` ('' for all), those with the most
        fact versions as subject first, then by name; embeddings left out."""
        ...

    async def fact_versions(self, group_id: str, uuid: str) -> list[Fact]:
        """All versions of the fact that the version (or fact) uuid belongs to."""
        ...

    async def ids_by_prefix(
        self, group_id: str, kind: Literal["episode", "fact"], prefix: str, limit: int
    ) -> list[str]:
        """Up to `limit` ids in the group starting with `prefix`, sorted: episode uuids, or
        the fact ids (`fact_uuid`) whose fact id or any version's uuid starts with it."""
        ...

    async def closures(self, group_id: str, limit: int) -> list[Fact]:
        """Closed versions (those with `invalidated_by`), newest first."""
        ...

    async def contested(self, group_id: str, limit: int) -> list[Fact]:
        """Believed contested versions (claims held for review), newest first."""
        ...

    async def stats(self, group_id: str, now: UtcDatetime) -> StoreStats: ...

    async def communities(self, group_id: str, having: list[str] | None = None) -> list[Community]:
        """The group's communities with all their members, embeddings left out; with
        `having`, only those with at least one of these entities as a member."""
        ...


class PlanWriter(Protocol):
    """The only ways kg changes a group: each plan is written atomically or not at all.

    Every write moves the group's version and returns the new one. A plan whose `base` is
    no longer the group's version raises WriteConflictError with nothing written: it was
    computed from reads another writer has since made stale.
    """

    async def version(self, group_id: str) -> GroupVersion:
        """The group's version now: read it before the reads a plan is computed from."""
        ...

    async def apply(self, plan: WritePlan) -> GroupVersion:
        """Write the whole plan atomically or raise with nothing written."""
        ...

    async def rewrite(self, plan: RewritePlan) -> GroupVersion:
        """Apply a rollback or erasure atomically or raise with nothing written."""
        ...

    async def write_communities(self, plan: CommunityPlan) -> GroupVersion:
        """Apply a community plan atomically or raise with nothing written."""
        ...

    async def set_hold(
        self, group_id: str, base: GroupVersion | None, hold: str | None
    ) -> GroupVersion:
        """Mark the group as being written in several steps (`hold`), or unmark it (None)."""
        ...


class SearchIndex(Protocol):
    """The reads search needs: every call filters on the group and the view before it ranks
    or cuts."""

    async def search_text(
        self, group_id: str, scope: Scope, query: str, view: SearchView, limit: int
    ) -> list[Scored]:
        """Full-text (BM25-family) hits, best first; an empty query gives no hits."""
        ...

    async def search_vector(
        self, group_id: str, scope: Scope, vector: list[float], view: SearchView, limit: int
    ) -> list[Scored]:
        """Nearest by cosine similarity, best first."""
        ...

    async def rank_text(
        self, group_id: str, scope: Scope, query: str, view: SearchView, limit: int
    ) -> list[tuple[str, float]]:
        """`search_text` as (uuid, score), without reading the items: search reads only the
        items that make its final top k (`items`)."""
        ...

    async def rank_vector(
        self, group_id: str, scope: Scope, vector: list[float], view: SearchView, limit: int
    ) -> list[tuple[str, float]]:
        """`search_vector` as (uuid, cosine similarity)."""
        ...

    async def text_ceiling(self, group_id: str, scope: Scope, query: str) -> float | None:
        """The most a document could score for `query` on `rank_text`'s scale (every term
        matched, at the term frequency that saturates), so a hit's score can be read as a
        share of what the query asks; None where the engine scores (Lucene on Neo4j)."""
        ...

    async def items(self, group_id: str, scope: Scope, uuids: list[str]) -> list[SearchItem]:
        """The scope's items by uuid, in any order; unknown uuids are absent."""
        ...

    async def turn_neighbours(
        self, group_id: str, uuids: list[str], view: SearchView
    ) -> dict[str, list[str]]:
        """Each episode's turns just before and just after it in its session, among the
        episodes in view (absent: no session, or alone in it)."""
        ...

    async def neighbourhood(
        self, group_id: str, entity_uuids: list[str], view: SearchView, limit: int
    ) -> list[Fact]:
        """Facts in view touching any of the entities: one hop of breadth-first search."""
        ...

    async def facts_between(
        self, group_id: str, pairs: list[tuple[str, str]], view: SearchView, limit: int
    ) -> list[Fact]:
        """Facts in view joining the two entities of any pair, in either direction."""
        ...

    async def episodes_mentioning_any(
        self, group_id: str, entity_uuids: list[str], view: SearchView, limit: int
    ) -> list[Scored]: ...

    async def entities_by_uuid(self, group_id: str, uuids: list[str]) -> list[EntityNode]: ...

    async def mention_counts(self, group_id: str, entity_uuids: list[str]) -> dict[str, int]: ...

    async def embeddings(
        self, group_id: str, scope: Scope, uuids: list[str]
    ) -> dict[str, list[float]]: ...


class MetricsStore(Protocol):
    async def ingest_metrics(self, group_id: str) -> IngestMetrics:
        """Sums of the per-episode metrics over the group's ingested episodes."""
        ...

    async def query_metrics(self, group_id: str) -> QueryMetrics: ...

    async def record_query_metrics(self, group_id: str, metrics: QueryMetrics) -> None:
        """Add the counters to the group's stored query metrics."""
        ...

    async def api_metrics(self, group_id: str) -> ApiMetrics: ...

    async def record_api_metrics(self, group_id: str, metrics: ApiMetrics) -> None:
        """Add the counters to the group's stored API call metrics (names already checked
        with `valid_call_name`)."""
        ...


class Groups(Protocol):
    async def has_group(self, group_id: str) -> bool:
        """Whether the group holds anything; cheap (an index lookup), so fine on a hot path."""
        ...

    async def groups(self) -> list[str]:
        """Every group, sorted: a listing for people, not for the write path."""
        ...


class StoreAdmin(Groups, Protocol):
    """The store as a whole: what it is, its schema, deleting and compacting, closing."""

    backend: str
    # The dimension of the store's vector indexes (None: no embedder, no vector indexes).
    embedding_dim: int | None

    async def ensure_schema(self, group_id: str) -> None:
        """Create constraints and indexes for the group if missing; cheap when already done."""
        ...

    async def drop_group(self, group_id: str) -> None:
        """Physically delete everything of the group."""
        ...

    async def compact(self) -> str | None:
        """Make deletions reach the files on disk (no history of deleted data kept there).
        None when done; otherwise, one line saying what may remain on disk and how to
        remove it (a store that cannot scrub its files online)."""
        ...

    async def raw_query(
        self,
        group_id: str,
        query: str,
        params: dict[str, Any] | None = None,
        *,
        write: bool = False,
    ) -> list[dict[str, Any]]:
        """Run one query in the backend's own language, unchecked, rows as {column: value}:
        for operators, notebooks and tests. kg itself never calls it."""
        ...

    async def close(self) -> None: ...


class EmbeddingModels(Protocol):
    """Which model embedded each group (kg.schemas.embedder): vectors of two models do not
    compare, so the facade records the first and refuses another."""

    async def embedding_model(self, group_id: str) -> EmbeddingModel | None: ...

    async def record_embedding_model(self, group_id: str, model: EmbeddingModel) -> EmbeddingModel:
        """Record `model` unless the group has one already; returns the one on record."""
        ...


class ErasureLog(Protocol):
    """Erasures not finished yet, kept outside every group's data (a group's drop must not
    take its own erasure record with it) and read whole: there are few, and only briefly."""

    async def pending_erasures(self) -> list[PendingErasure]: ...

    async def record_erasure(self, erasure: PendingErasure) -> None:
        """Write (or overwrite, by uuid) the record, durably, before the caller deletes."""
        ...

    async def clear_erasure(self, uuid: str) -> None: ...


class RecordTransfer(Protocol):
    """Records in and out whole (uuids, times, vectors): export, import, adoption."""

    async def dump_page(
        self, group_id: str, kind: RecordKind, after: str, limit: int
    ) -> list[dict[str, Any]]:
        """Up to `limit` records of a kind with uuid > `after`, in uuid order, vectors
        included, as stored property maps (graphs other tools wrote have extra properties)."""
        ...

    async def patch(
        self, group_id: str, items: Sequence[Patchable], *, base: GroupVersion | None = None
    ) -> GroupVersion:
        """Overwrite kg's properties of stored entities, episodes or edges, matched by uuid
        (properties kg does not model are kept); used to adopt graphs other tools wrote.
        Versioned like a plan (see PlanWriter)."""
        ...

    async def load(
        self, group_id: str, items: Sequence[Record], *, base: GroupVersion | None = None
    ) -> GroupVersion:
        """Recreate exported records exactly (uuids, times, vectors), atomically; each
        record's kind is its model. Versioned like a plan (see PlanWriter)."""
        ...


class KeyStore(Protocol):
    """API keys (kg.schemas.keys), in the reserved namespace every process on the store sees:
    one server's `kg keys revoke` reaches all servers at their next request."""

    async def put_key(self, record: ApiKeyRecord) -> None:
        """Store a new key record (its key_id is new)."""
        ...

    async def key(self, key_id: str) -> ApiKeyRecord | None:
        """The record named by `key_id`, revoked or not."""
        ...

    async def keys(self) -> list[ApiKeyRecord]:
        """Every key record, oldest first."""
        ...

    async def revoke_key(self, key_id: str, at: UtcDatetime) -> ApiKeyRecord | None:
        """Mark the key revoked at `at` (kept for the record); None if there is no such key."""
        ...


class WorkQueue(Protocol):
    """The background queue, kept in the store (see kg.store.cypher.queue): queued episodes
    are episodes, every transition is an atomic conditional update, and the write completing
    an episode is guarded by its lease (`WritePlan.lease_owner`)."""

    async def enqueue(self, node: EpisodicNode) -> tuple[EpisodicNode, bool]:
        """Store a queued episode unless the group has it (content hash or idempotency key):
        (the stored episode, whether it is this one)."""
        ...

    async def episode_by_key(
        self, group_id: str, content_hash: str, key: str | None
    ) -> EpisodicNode | None: ...

    async def debounce(self, group_id: str, session_id: str, until: UtcDatetime) -> int: ...

    async def ready(
        self, group_id: str, owner: str, now: UtcDatetime, limit: int
    ) -> tuple[list[EpisodicNode], bool]:
        """The next claimable episodes in order, and whether another worker holds the group."""
        ...

    async def claim(
        self, group_id: str, owner: str, uuids: list[str], now: UtcDatetime, until: UtcDatetime
    ) -> list[EpisodicNode]: ...

    async def renew(
        self, group_id: str, owner: str, uuids: list[str], until: UtcDatetime
    ) -> set[str]: ...

    async def stage(self, group_id: str, uuid: str, owner: str, staged: str) -> bool: ...

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
    ) -> bool: ...

    async def abandon(
        self, group_id: str, uuid: str, now: UtcDatetime, max_attempts: int, error: str
    ) -> bool: ...

    async def session_activity(self, group_id: str, sessions: list[str]) -> dict[str, datetime]: ...

    async def context_before(
        self, group_id: str, episode: EpisodicNode, limit: int
    ) -> list[EpisodicNode]: ...

    async def queue_metrics(self, group_id: str, now: UtcDatetime) -> QueueMetrics: ...

    async def queued_groups(self, groups: Sequence[str]) -> list[str]: ...


STAGING_PREFIX = "kg-import:"


def staging_name(group_id: str, nonce: str) -> str:
    """Where an import into `group_id` is loaded before it is published: not a group id
    (':' is not allowed in one), so no listing or lookup of groups ever sees it."""
    return f"{STAGING_PREFIX}{group_id}:{nonce}"


def is_staging(name: str, group_id: str | None = None) -> bool:
    prefix = STAGING_PREFIX if group_id is None else f"{STAGING_PREFIX}{group_id}:"
    return name.startswith(prefix)


class StagedImport(Protocol):
    """An import loads into a staging area and becomes the group in one step, so a killed
    or failed import never leaves a partial group behind, and a retry is always possible."""

    async def load_staged(self, group_id: str, staging: str, items: Sequence[Record]) -> None:
        """`load`, into the staging area: the records belong to `group_id` (their group_id
        is the target's), but nothing of them is visible as the group yet."""
        ...

    async def publish_staged(self, group_id: str, staging: str) -> None:
        """Make the staged records the group `group_id`, atomically; WriteConflictError if
        the group exists by now (another writer created it)."""
        ...

    async def drop_staged(self, staging: str) -> None: ...

    async def staged(self, group_id: str) -> list[str]:
        """Staging areas left for the group (by a killed import)."""
        ...


class Placement(BaseModel):
    """Which store server of a deployment holds a group (kg.store.placed): one row a group in
    the directory store. `moving`: a `kg placement move` is copying it elsewhere."""

    group_id: GroupId
    store: str
    moving: bool = False


class PlacementTable(Protocol):
    """The directory of a deployment on several store servers, kept in one of its stores (not
    in the clients), so a group can move and a server can be added without moving others."""

    async def placement(self, group_id: str) -> Placement | None: ...

    async def place(self, group_id: str, store: str) -> Placement:
        """The group's row, written with `store` if it has none (MERGE: two processes placing
        one new group agree on the row that won)."""
        ...

    async def set_placement(self, placement: Placement) -> None:
        """Write the group's row as given (a move marks it moving, then switches it)."""
        ...

    async def placements(self) -> list[Placement]:
        """Every row, by group id."""
        ...


class ReplayStore(EpisodeLog, Timelines, Protocol):
    """What replay and rollback plans are computed from: the episode log and the timelines."""


class GraphStore(
    EpisodeLog,
    Timelines,
    PlanningRead,
    FactReader,
    PlanWriter,
    SearchIndex,
    MetricsStore,
    StoreAdmin,
    RecordTransfer,
    StagedImport,
    EmbeddingModels,
    KeyStore,
    ErasureLog,
    WorkQueue,
    Protocol,
):
    """The whole contract: what the facade holds and every backend implements."""
