"""The one narrow interface through which ingest, retrieval and the facade reach a graph store.

Backends (embedded FalkorDB, Neo4j) implement it; nothing above them writes Cypher.
Every method is scoped to one group: there is no call that reads across groups.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from kg.schemas.graph import AuditEvent, CommunityNode, EntityNode, EpisodicNode, Fact, FactEdge
from kg.schemas.metrics import IngestMetrics, QueryMetrics
from kg.schemas.plan import CommunityPlan, RewritePlan, WritePlan
from kg.schemas.search import Scope, Scored, SearchView
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


class GraphStore(Protocol):
    backend: str

    async def ensure_schema(self, group_id: str) -> None:
        """Create constraints and indexes for the group if missing; cheap when already done."""
        ...

    async def episode_by_hash(self, group_id: str, content_hash: str) -> EpisodicNode | None: ...

    async def entities_by_key(self, group_id: str, name_keys: list[str]) -> list[EntityNode]: ...

    async def live_edges(self, group_id: str, keys: list[TimelineKey]) -> list[FactEdge]:
        """Versions not yet retired (expired_at null) on the given timelines."""
        ...

    async def timeline_versions(self, group_id: str, keys: list[TimelineKey]) -> list[FactEdge]:
        """Every version on the given timelines, retired ones included."""
        ...

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

    async def recent_episodes(self, group_id: str, limit: int) -> list[EpisodicNode]:
        """The group's latest ingested episodes, oldest first: context for extraction."""
        ...

    async def episodes_mentioning(self, group_id: str, entity_uuid: str) -> list[EpisodicNode]: ...

    async def fact_versions(self, group_id: str, uuid: str) -> list[Fact]:
        """All versions of the fact that the version (or fact) uuid belongs to."""
        ...

    async def audit_log(self, group_id: str, limit: int) -> list[AuditEvent]: ...

    async def closures(self, group_id: str, limit: int) -> list[Fact]:
        """Closed versions (those with `invalidated_by`), newest first."""
        ...

    async def apply(self, plan: WritePlan) -> None:
        """Write the whole plan atomically or raise with nothing written."""
        ...

    async def rewrite(self, plan: RewritePlan) -> None:
        """Apply a rollback or erasure atomically or raise with nothing written."""
        ...

    async def drop_group(self, group_id: str) -> None:
        """Physically delete everything of the group."""
        ...

    async def compact(self) -> None:
        """Make deletions reach the files on disk (no history of deleted data kept there)."""
        ...

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

    async def stats(self, group_id: str, now: UtcDatetime) -> StoreStats: ...

    async def ingest_metrics(self, group_id: str) -> IngestMetrics:
        """Sums of the per-episode metrics over the group's ingested episodes."""
        ...

    async def query_metrics(self, group_id: str) -> QueryMetrics: ...

    async def record_query_metrics(self, group_id: str, metrics: QueryMetrics) -> None:
        """Add the counters to the group's stored query metrics."""
        ...

    async def dump_page(
        self, group_id: str, kind: str, after: str, limit: int
    ) -> list[dict[str, Any]]:
        """Export: up to `limit` items of a kind (entities, episodes, edges, mentions,
        communities, members, audit) with uuid > `after`, in uuid order, vectors included."""
        ...

    async def patch(self, group_id: str, kind: str, items: list[Any]) -> None:
        """Overwrite kg's properties of stored entities, episodes or edges, matched by uuid
        (properties kg does not model are kept); used to adopt graphs other tools wrote."""
        ...

    async def load(self, group_id: str, kind: str, items: list[Any]) -> None:
        """Import: recreate exported items exactly (uuids, times, vectors), atomically."""
        ...

    async def communities(self, group_id: str, having: list[str] | None = None) -> list[Community]:
        """The group's communities with all their members, embeddings left out; with
        `having`, only those with at least one of these entities as a member."""
        ...

    async def write_communities(self, plan: CommunityPlan) -> None:
        """Apply a community plan atomically or raise with nothing written."""
        ...

    # -- search: every call filters on the group and the view before it ranks or cuts ------

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

    async def neighbourhood(
        self, group_id: str, entity_uuids: list[str], view: SearchView, limit: int
    ) -> list[Fact]:
        """Facts in view touching any of the entities: one hop of breadth-first search."""
        ...

    async def episodes_mentioning_any(
        self, group_id: str, entity_uuids: list[str], view: SearchView, limit: int
    ) -> list[Scored]: ...

    async def entities_by_uuid(self, group_id: str, uuids: list[str]) -> list[EntityNode]: ...

    async def mention_counts(self, group_id: str, entity_uuids: list[str]) -> dict[str, int]: ...

    async def embeddings(
        self, group_id: str, scope: Scope, uuids: list[str]
    ) -> dict[str, list[float]]: ...

    async def groups(self) -> list[str]: ...

    async def close(self) -> None: ...
