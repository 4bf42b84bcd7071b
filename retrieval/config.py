"""How a search runs: which branches per layer, how they are fused and reranked, and recipes.

Modelled on Graphiti's search config recipes: a `SearchConfig` says, per scope, which methods
run (bm25, cosine, bfs) and which reranker orders the fused candidates; `RECIPES` names the
useful combinations, so callers pick `"facts_hybrid_mmr"` instead of assembling a config.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kg.schemas.episode import TrustTier


class Method(StrEnum):
    bm25 = "bm25"
    cosine = "cosine"
    bfs = "bfs"


class Fusion(StrEnum):
    """How a scope's branch results become one ranking (before any reranker)."""

    rrf = "rrf"  # reciprocal ranks: scores ignored
    score = "score"  # convex combination of min-max normalised scores (fusion.score_fusion)


class Reranker(StrEnum):
    rrf = "rrf"
    mmr = "mmr"
    cross_encoder = "cross_encoder"
    node_distance = "node_distance"
    episode_mentions = "episode_mentions"


class ScopeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    methods: tuple[Method, ...] = (Method.bm25, Method.cosine, Method.bfs)
    reranker: Reranker = Reranker.rrf
    limit: int = Field(default=10, ge=1, le=1000)

    @model_validator(mode="after")
    def _some_method(self) -> Self:
        if not self.methods:
            raise ValueError("a scope needs at least one search method")
        return self


# Agent inferences and documents rank below what the user said, at equal relevance; a tool's
# output (an API's answer) counts as the user's word. A prior, not measured: LoCoMo has only
# user turns. Confirmation by a higher tier lifts a fact to that tier's weight.
TRUST_WEIGHTS = {
    TrustTier.user: 1.0,
    TrustTier.tool: 1.0,
    TrustTier.document: 0.85,
    TrustTier.agent: 0.7,
}


# Chosen on LoCoMo's development conversations (benchmarks/locomo_fusion.py --dated), see
# docs/retrieval.md, "Questions that ask when".
DATED_BOOST = 1.0


# Chosen on LoCoMo's development conversations (benchmarks/locomo_multihop.py), see
# docs/retrieval.md, "Turns next to a hit".
NEIGHBOUR_BOOST = 0.5


# Chosen on LoCoMo's development conversations with their observation facts extracted
# (benchmarks/locomo_recall.py --turns extracted), see docs/retrieval.md, "Entities named by
# the question".
ENTITY_BOOST = 0.5


class EntityAnchors(StrEnum):
    """Whose facts the entity expansion follows (kg.retrieval.entities)."""

    named = "named"  # the entities the query names
    hits = "hits"  # the entities of the first pass's best hits' facts
    both = "both"
    any = "any"  # every fact: the facts most like the query, whoever they are about


class SearchConfig(BaseModel):
    """Scopes left as None are not searched."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    facts: ScopeConfig | None = ScopeConfig()
    entities: ScopeConfig | None = None
    episodes: ScopeConfig | None = None
    communities: ScopeConfig | None = None
    fusion: Fusion = Field(
        default=Fusion.rrf, description="rrf (ranks only) or score (normalised scores)."
    )
    rrf_k: float = Field(default=60.0, gt=0, description="RRF's rank constant.")
    weights: dict[Method, float] = Field(
        default_factory=dict,
        description="Vote per method in fusion (1 when absent), e.g. {'bm25': 2} when the "
        "embedder is weak next to full text. Score fusion scales them to sum to 1.",
    )
    window: int = Field(default=50, ge=1, le=5000, description="Candidates per branch.")
    mmr_lambda: float = Field(default=0.5, ge=0.0, le=1.0, description="1 = relevance only.")
    bfs_depth: int = Field(default=2, ge=1, le=4)
    bfs_seeds: int = Field(
        default=5, ge=1, le=100, description="Top hits of the other branches that seed BFS."
    )
    drop_question_words: bool = Field(
        default=True,
        description="Drop question words (what, when, did...) from the full-text query; the "
        "cosine branch still embeds the whole query (kg.retrieval.query).",
    )
    abstain_below: float | None = Field(
        default=None,
        ge=-1.0,
        le=1.0,
        description="Return nothing for a scope whose best cosine similarity to the query is "
        "below this: the question is about something never said. Needs the cosine method. "
        "For all-MiniLM-L6-v2, 0.49 refused 3% of LoCoMo's answerable held-out questions and "
        "35% of questions about things never said (benchmarks/locomo_abstain.py).",
    )
    abstain_joint_below: float | None = Field(
        default=None,
        ge=-1.0,
        le=1.0,
        description="Return nothing for a scope when no candidate is found by both meaning and "
        "words: the best, over the candidates, of the mean of its cosine similarity and its "
        "BM25 score as a share of the most the query could score, is below this. Needs the "
        "bm25 and cosine methods, an embedder, and kg's own BM25 (FalkorDB). For "
        "all-MiniLM-L6-v2 over unextracted turns, 0.27 refused 4% of LoCoMo's answerable "
        "development questions; on kg eval's structured sets 0.348 refused 2%. The cutoff "
        "depends on what is indexed: calibrate it (benchmarks/eval_abstain_joint.py).",
    )
    min_score: float | None = Field(
        default=None, description="Drop results whose final score is below this; may leave none."
    )
    read_time: bool = Field(
        default=True,
        description="Read time expressions in the query ('in 2022', 'last March', '작년 3월') "
        "as a window: facts must be valid in it, episodes in it are boosted "
        "(kg.retrieval.when). The words leave the full-text query.",
    )
    time_boost: float = Field(
        default=0.5,
        ge=0.0,
        description="Episodes whose reference time is in the query's window get their fused "
        "score times (1 + this). A boost, not a filter: a turn may speak of an earlier time.",
    )
    dated_boost: float = Field(
        default=DATED_BOOST,
        ge=0.0,
        description="A question that asks when ('When did...', 'what year', '언제'): episodes "
        "that say when by their own words ('yesterday', 'last week', 'in May') get their fused "
        "score times (1 + this), with score fusion; 0 turns it off (kg.retrieval.dated).",
    )
    neighbour_boost: float = Field(
        default=NEIGHBOUR_BOOST,
        ge=0.0,
        description="Episodes: the turns just before and after each of the best "
        "`neighbour_hits` in their session get this times that hit's fused score added (and "
        "join the candidates), with score fusion; an answer often sits next to the turn "
        "that matches the question. 0 turns it off.",
    )
    neighbour_hits: int = Field(
        default=20, ge=1, le=1000, description="The best hits whose session neighbours are lifted."
    )
    entity_boost: float = Field(
        default=ENTITY_BOOST,
        ge=0.0,
        description="Episodes, on groups with extracted facts: the episodes citing the facts "
        "most like the query, among those of the entities it names, get this times the best "
        "fused score, times the fact's share of the facts' score range, added (and join the "
        "candidates), with score fusion (kg.retrieval.entities). 0 turns it off; a group "
        "whose best hits have no facts (raw turns) reads nothing more.",
    )
    entity_facts: int = Field(
        default=50, ge=1, le=1000, description="Facts the entity expansion ranks and follows."
    )
    entity_anchors: EntityAnchors = Field(
        default=EntityAnchors.named,
        description="Whose facts the entity expansion follows: the entities the query names, "
        "those of the best hits' facts, both, or any fact.",
    )
    trust_weights: dict[TrustTier, float] = Field(
        default_factory=lambda: dict(TRUST_WEIGHTS),
        description="Fused score factor per trust tier of a fact (the highest tier among the "
        "episodes supporting it, so a user's restatement confirms an agent's inference).",
    )

    @model_validator(mode="after")
    def _positive_weights(self) -> Self:
        bad = {m.value: w for m, w in self.weights.items() if not w > 0}
        if bad:
            raise ValueError(f"fusion weights must be positive, got {bad}")
        return self

    @model_validator(mode="after")
    def _trust_range(self) -> Self:
        bad = {t.name: w for t, w in self.trust_weights.items() if not 0 < w <= 1}
        if bad:
            raise ValueError(f"trust weights must be in (0, 1], got {bad}")
        return self

    @model_validator(mode="after")
    def _some_scope(self) -> Self:
        if not any((self.facts, self.entities, self.episodes, self.communities)):
            raise ValueError("a search config needs at least one scope")
        return self


_HYBRID = (Method.bm25, Method.cosine, Method.bfs)
_TEXT_VECTOR = (Method.bm25, Method.cosine)


def _facts(reranker: Reranker, methods: tuple[Method, ...] = _HYBRID) -> SearchConfig:
    return SearchConfig(facts=ScopeConfig(methods=methods, reranker=reranker))


def _episodes(reranker: Reranker, methods: tuple[Method, ...] = _TEXT_VECTOR) -> SearchConfig:
    return SearchConfig(facts=None, episodes=ScopeConfig(methods=methods, reranker=reranker))


# Score fusion of BM25 and cosine, BM25 weighted 0.6: chosen on LoCoMo's first three
# conversations (0.5 to 0.7 are within a point of each other there), then measured on the other
# three, where it beats both of its branches at every k, for turns and for facts alike
# (benchmarks/locomo_fusion.py, docs/retrieval.md). RRF gave the weaker cosine branch an
# equal vote and lost to BM25 alone at k = 5.
SCORE_WEIGHTS = {Method.bm25: 0.6, Method.cosine: 0.4}


def _score_fused(*, facts: bool, episodes: bool = False) -> SearchConfig:
    cfg = ScopeConfig(methods=_TEXT_VECTOR)
    return SearchConfig(
        facts=cfg if facts else None,
        episodes=cfg if episodes or not facts else None,
        fusion=Fusion.score,
        weights=SCORE_WEIGHTS,
    )


# The default hybrid is BM25 + cosine (the branches of Graphiti's EDGE_HYBRID_SEARCH_RRF),
# score-fused. BFS seeded from the best hits pulls in the whole neighbourhood of a hub (a
# speaker touches every fact said about them): on LoCoMo's observation facts it cost 6.6 points
# of R@5 (51.0 -> 44.4). So BFS runs in facts_hybrid_bfs_rrf and the node-distance and
# episode-mention recipes, where the graph's shape is the point.
RECIPES: dict[str, SearchConfig] = {
    "facts_hybrid": _score_fused(facts=True),
    "facts_episodes_hybrid": _score_fused(facts=True, episodes=True),
    "facts_hybrid_rrf": _facts(Reranker.rrf, _TEXT_VECTOR),
    "facts_hybrid_bfs_rrf": _facts(Reranker.rrf),
    "facts_hybrid_mmr": _facts(Reranker.mmr, _TEXT_VECTOR),
    "facts_hybrid_cross_encoder": _facts(Reranker.cross_encoder, _TEXT_VECTOR),
    "facts_hybrid_node_distance": _facts(Reranker.node_distance),
    "facts_hybrid_episode_mentions": _facts(Reranker.episode_mentions),
    "facts_bm25": _facts(Reranker.rrf, (Method.bm25,)),
    "facts_cosine": _facts(Reranker.rrf, (Method.cosine,)),
    "entities_hybrid_rrf": SearchConfig(facts=None, entities=ScopeConfig()),
    "episodes_bm25": _episodes(Reranker.rrf, (Method.bm25,)),
    "episodes_cosine": _episodes(Reranker.rrf, (Method.cosine,)),
    "episodes_hybrid": _score_fused(facts=False),
    "episodes_hybrid_rrf": _episodes(Reranker.rrf),
    "episodes_hybrid_mmr": _episodes(Reranker.mmr),
    "episodes_hybrid_cross_encoder": _episodes(Reranker.cross_encoder),
    "communities_bm25": SearchConfig(facts=None, communities=ScopeConfig(methods=(Method.bm25,))),
    "communities_hybrid_rrf": SearchConfig(
        facts=None, communities=ScopeConfig(methods=_TEXT_VECTOR)
    ),
    "combined_hybrid_rrf": SearchConfig(
        facts=ScopeConfig(),
        entities=ScopeConfig(),
        episodes=ScopeConfig(methods=_TEXT_VECTOR),
        communities=ScopeConfig(methods=_TEXT_VECTOR),
    ),
}
DEFAULT_RECIPE = "facts_hybrid"
# The default where kg has no LLM: text can then only be stored unextracted (no facts), so
# the default also searches the episodes, and finds it (MCP's combined recipe always does).
DEFAULT_RECIPE_WITHOUT_LLM = "facts_episodes_hybrid"
