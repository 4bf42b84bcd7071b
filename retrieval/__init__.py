"""Query -> ranked facts: search branches, fusion, rerankers, context rendering.

Depends only on `schemas` and reaches the graph through `kg.schemas.store.SearchIndex`; never
imports `ingest`.
"""

from kg.retrieval.config import DEFAULT_RECIPE, RECIPES, Method, Reranker, ScopeConfig, SearchConfig
from kg.retrieval.context import render_context
from kg.retrieval.rerankers import CrossEncoder, SentenceTransformerCrossEncoder
from kg.retrieval.results import SearchResults
from kg.retrieval.search import SearchError, search

__all__ = [
    "DEFAULT_RECIPE",
    "RECIPES",
    "CrossEncoder",
    "Method",
    "Reranker",
    "ScopeConfig",
    "SearchConfig",
    "SearchError",
    "SearchResults",
    "SentenceTransformerCrossEncoder",
    "render_context",
    "search",
]
