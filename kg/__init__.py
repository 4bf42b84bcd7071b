"""kg: a bi-temporal knowledge-graph memory engine for AI agents."""

from kg.errors import (
    DataDirLockedError,
    InputError,
    KGError,
    StoreError,
    StoreUnavailableError,
)
from kg.facade import KG, EpisodeResult
from schemas import (
    DEFAULT_ONTOLOGY,
    Channel,
    Episode,
    EpisodeSource,
    Fact,
    FactEdge,
    Ontology,
    Predicate,
    StructuredFact,
    TrustTier,
)

__all__ = [
    "DEFAULT_ONTOLOGY",
    "KG",
    "Channel",
    "DataDirLockedError",
    "Episode",
    "EpisodeResult",
    "EpisodeSource",
    "Fact",
    "FactEdge",
    "InputError",
    "KGError",
    "Ontology",
    "Predicate",
    "StoreError",
    "StoreUnavailableError",
    "StructuredFact",
    "TrustTier",
]
