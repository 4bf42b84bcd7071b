"""FalkorDB indexes and unique constraints, as plain Cypher text.

Only trusted constants and validated integers are interpolated here; no user input reaches DDL.
"""

from __future__ import annotations

from kg.store.cypher.dialect import check_dimension

# FalkorDB keeps one graph per group, so group_id needs no index there. Unique constraints
# need an exact-match index first; they are created with GRAPH.CONSTRAINT (see the store).
FALKORDB_INDEXES: tuple[str, ...] = (
    "CREATE INDEX FOR (n:Entity) ON (n.uuid)",
    "CREATE INDEX FOR (n:Entity) ON (n.name_key)",
    "CREATE INDEX FOR (n:Episodic) ON (n.uuid)",
    "CREATE INDEX FOR (n:Episodic) ON (n.content_hash)",
    "CREATE INDEX FOR (n:Community) ON (n.uuid)",
    "CREATE INDEX FOR (n:KGGroup) ON (n.group_id)",
    "CREATE INDEX FOR ()-[e:RELATES_TO]-() ON (e.uuid)",
    "CREATE INDEX FOR ()-[e:RELATES_TO]-() ON (e.fact_uuid)",
    "CREATE INDEX FOR ()-[e:RELATES_TO]-() ON (e.name)",
    # text_grams: CJK bigrams written beside the text (kg.store.cypher.analyzer), so particles and
    # endings attached without a space do not hide a word from the index.
    "CREATE FULLTEXT INDEX FOR (n:Entity) ON (n.name, n.summary, n.text_grams)",
    "CREATE FULLTEXT INDEX FOR (n:Episodic) ON (n.content, n.text_grams)",
    "CREATE FULLTEXT INDEX FOR (n:Community) ON (n.name, n.summary, n.text_grams)",
    "CREATE FULLTEXT INDEX FOR ()-[e:RELATES_TO]-() ON (e.fact, e.text_grams)",
)

# (label, property) pairs that get a unique constraint on FalkorDB.
FALKORDB_UNIQUE: tuple[tuple[str, str], ...] = (
    ("Entity", "uuid"),
    ("Episodic", "uuid"),
    ("Community", "uuid"),
    ("KGGroup", "group_id"),  # the version node: one per group (kg.store.cypher.base.Fence)
)


def falkordb_vector_indexes(dimension: int) -> tuple[str, ...]:
    dim = check_dimension(dimension)
    opts = f"OPTIONS {{dimension: {dim}, similarityFunction: 'cosine'}}"
    return (
        f"CREATE VECTOR INDEX FOR (n:Entity) ON (n.name_embedding) {opts}",
        f"CREATE VECTOR INDEX FOR (n:Community) ON (n.name_embedding) {opts}",
        f"CREATE VECTOR INDEX FOR (n:Episodic) ON (n.content_embedding) {opts}",
        f"CREATE VECTOR INDEX FOR ()-[e:RELATES_TO]-() ON (e.fact_embedding) {opts}",
    )
