"""kg: a bi-temporal knowledge-graph memory engine for AI agents.

Everything a user needs is importable from here; the subpackages are the layers:
`kg.schemas` (pure data and the store contract), `kg.ingest` (episode -> write plan),
`kg.retrieval` (query -> ranked context), `kg.store` (backends) and `kg.cli`.
"""

from kg.erasure import ErasureReceipt
from kg.errors import (
    DataDirLockedError,
    ExtractionError,
    InputError,
    KGError,
    LLMRequiredError,
    NotFoundError,
    StoreError,
    StoreUnavailableError,
    WriteConflictError,
)
from kg.facade import KG, BulkResult, CommunityReport, EpisodeResult, Explanation, QuarantineEntry
from kg.ingest.embeddings import OpenAIEmbedder, SentenceTransformerEmbedder, local_minilm
from kg.ingest.extraction import Guards
from kg.ingest.llm import LLMError, OpenAILLM, ScriptedLLM, StructuredLLM
from kg.retrieval import (
    DEFAULT_RECIPE,
    RECIPES,
    CrossEncoder,
    Method,
    Reranker,
    ScopeConfig,
    SearchConfig,
    SearchResults,
    SentenceTransformerCrossEncoder,
)
from kg.retrieval.request import SearchRequest
from kg.rollback import ReplayReport, RollbackReport
from kg.schemas import (
    DEFAULT_ONTOLOGY,
    Channel,
    CommunityNode,
    EdgeStatus,
    EntityNode,
    EntityType,
    Episode,
    EpisodeSource,
    EpisodeStatus,
    EpisodicNode,
    Fact,
    FactEdge,
    Ontology,
    PlanSummary,
    Predicate,
    Quarantined,
    StoreStats,
    StructuredFact,
    TrustTier,
)
from kg.schemas.embedder import Embedder
from kg.schemas.metrics import Metrics
from kg.store.falkordb.embedded import LoadProgress
from kg.transfer import TransferReport

__all__ = [
    "DEFAULT_ONTOLOGY",
    "DEFAULT_RECIPE",
    "KG",
    "RECIPES",
    "BulkResult",
    "Channel",
    "CommunityNode",
    "CommunityReport",
    "CrossEncoder",
    "DataDirLockedError",
    "EdgeStatus",
    "Embedder",
    "EntityNode",
    "EntityType",
    "Episode",
    "EpisodeResult",
    "EpisodeSource",
    "EpisodeStatus",
    "EpisodicNode",
    "ErasureReceipt",
    "Explanation",
    "ExtractionError",
    "Fact",
    "FactEdge",
    "Guards",
    "InputError",
    "KGError",
    "LLMError",
    "LLMRequiredError",
    "LoadProgress",
    "Method",
    "Metrics",
    "NotFoundError",
    "Ontology",
    "OpenAIEmbedder",
    "OpenAILLM",
    "PlanSummary",
    "Predicate",
    "QuarantineEntry",
    "Quarantined",
    "ReplayReport",
    "Reranker",
    "RollbackReport",
    "ScopeConfig",
    "ScriptedLLM",
    "SearchConfig",
    "SearchRequest",
    "SearchResults",
    "SentenceTransformerCrossEncoder",
    "SentenceTransformerEmbedder",
    "StoreError",
    "StoreStats",
    "StoreUnavailableError",
    "StructuredFact",
    "StructuredLLM",
    "TransferReport",
    "TrustTier",
    "WriteConflictError",
    "local_minilm",
]
