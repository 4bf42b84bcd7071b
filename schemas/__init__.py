"""Pure data shared by every layer of kg: models, ontology, write plans, the store contract.

Nothing here imports the rest of kg, so `ingest` and `retrieval` can depend on this package
alone and never on each other.
"""

from kg.schemas.episode import Channel, Episode, EpisodeSource, StructuredFact, TrustTier
from kg.schemas.graph import (
    CommunityNode,
    EdgeStatus,
    EntityNode,
    EpisodeStatus,
    EpisodicNode,
    Fact,
    FactEdge,
    Quarantined,
)
from kg.schemas.labels import RESERVED_LABELS
from kg.schemas.ontology import DEFAULT_ONTOLOGY, EntityType, Ontology, Predicate
from kg.schemas.plan import EdgeReinforcement, EdgeRetirement, PlanSummary, WritePlan
from kg.schemas.store import FactQuery, GraphStore, StoreStats, TimelineKey

__all__ = [
    "DEFAULT_ONTOLOGY",
    "RESERVED_LABELS",
    "Channel",
    "CommunityNode",
    "EdgeReinforcement",
    "EdgeRetirement",
    "EdgeStatus",
    "EntityNode",
    "EntityType",
    "Episode",
    "EpisodeSource",
    "EpisodeStatus",
    "EpisodicNode",
    "Fact",
    "FactEdge",
    "FactQuery",
    "GraphStore",
    "Ontology",
    "PlanSummary",
    "Predicate",
    "Quarantined",
    "StoreStats",
    "StructuredFact",
    "TimelineKey",
    "TrustTier",
    "WritePlan",
]
