"""Query -> ranked facts: search branches, fusion, rerankers, context rendering.

Depends only on `schemas` and reaches the graph through `schemas.store.GraphStore`; never
imports `ingest`.
"""

from retrieval.config import DEFAULT_RECIPE, RECIPES, Method, Reranker, ScopeConfig, SearchConfig
from retrieval.context import render_context
from retrieval.rerankers import CrossEncoder, SentenceTransformerCrossEncoder
from retrieval.results import SearchResults
from retrieval.search import SearchError, search

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
