"""What a search returns: ranked hits per layer, and how each branch did (hits, latency)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from kg.retrieval.when import QueryTime
from kg.schemas.graph import CommunityNode, EntityNode, EpisodicNode, Fact
from kg.schemas.search import Scope, SearchView


class BranchReport(BaseModel):
    """One search branch's outcome; a branch with 0 hits or an error is visible, not silent."""

    scope: Scope
    method: str
    hits: int
    latency_ms: float
    error: str | None = None


class AbstainCheck(BaseModel):
    """One abstention test a scope ran, passed or not: which signal, its value, the cutoff.
    Every test is kept, so an answer shows why it was not refused as well as a refusal why
    it was (kg search --explain)."""

    signal: str = Field(description="'cosine' (abstain_below) or 'joint' (abstain_joint_below).")
    value: float = Field(description="The scope's signal for this query.")
    cutoff: float
    abstained: bool = Field(description="The value is below the cutoff: the scope is empty.")

    def why(self) -> str:
        """One line: the decision and the evidence behind it."""
        what = {
            "cosine": "best cosine similarity",
            "joint": "best agreement of meaning and words on one hit (mean of cosine and BM25 "
            "share)",
        }.get(self.signal, self.signal)
        if self.abstained:
            return f"abstained: {what} {self.value:.3f} < {self.cutoff:g}"
        return f"answered: {what} {self.value:.3f} >= {self.cutoff:g}"


class Ranked(BaseModel):
    score: float = Field(description="The final reranker's score; higher is better.")
    ranks: dict[str, int] = Field(
        default_factory=dict, description="1-based rank of the item in each branch that found it."
    )
    branch_scores: dict[str, float] = Field(
        default_factory=dict,
        description="Each branch's own score: full-text score, cosine similarity, 1/hops.",
    )
    fused_score: float = Field(description="Fused score (RRF or score fusion) before reranking.")


class FactHit(Ranked):
    fact: Fact
    closed: bool = Field(
        description="Not true at the view's valid time (history views and time windows only)."
    )
    trust_factor: float = Field(
        default=1.0, description="Fused score factor for the fact's trust tier (confirmed)."
    )
    recency_factor: float = Field(
        default=1.0, description="Fused score factor for the time since it was last stated."
    )


class EntityHit(Ranked):
    entity: EntityNode


class EpisodeHit(Ranked):
    episode: EpisodicNode
    in_window: bool = Field(
        default=False, description="Its reference time is in the query's time window (boosted)."
    )


class CommunityHit(Ranked):
    community: CommunityNode


class SearchResults(BaseModel):
    query: str
    group_id: str
    view: SearchView
    facts: list[FactHit] = Field(default_factory=list)
    entities: list[EntityHit] = Field(default_factory=list)
    episodes: list[EpisodeHit] = Field(default_factory=list)
    communities: list[CommunityHit] = Field(default_factory=list)
    branches: list[BranchReport] = Field(default_factory=list)
    abstained: dict[Scope, float] = Field(
        default_factory=dict,
        description="Scopes left empty by abstain_below or abstain_joint_below, with the "
        "signal that fell below its cutoff (-1 when its branch found nothing).",
    )
    abstain_checks: dict[Scope, list[AbstainCheck]] = Field(
        default_factory=dict,
        description="Per scope, the abstention tests run (none without a cutoff), in order: "
        "why a scope was left empty, or why it was not.",
    )
    time: QueryTime | None = Field(
        default=None,
        description="The query's time expressions, how each was read, and the one applied.",
    )
    latency_ms: float = 0.0
