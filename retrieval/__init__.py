"""Query -> ranked facts: search branches, fusion, rerankers, context rendering.

Depends only on `schemas` and reaches the graph through `schemas.store.GraphStore`; never
imports `ingest`. The hybrid search itself is not built yet: today `KG.facts` answers exact
subject / predicate / object lookups in any bi-temporal view.
"""
