"""Constraints and indexes for each backend, as plain Cypher text.

Only trusted constants and validated integers are interpolated here; no user input reaches DDL.
"""

from __future__ import annotations

# FalkorDB keeps one graph per group, so group_id needs no index there. Unique constraints
# need an exact-match index first; they are created with GRAPH.CONSTRAINT (see the store).
FALKORDB_INDEXES: tuple[str, ...] = (
    "CREATE INDEX FOR (n:Entity) ON (n.uuid)",
    "CREATE INDEX FOR (n:Entity) ON (n.name_key)",
    "CREATE INDEX FOR (n:Episodic) ON (n.uuid)",
    "CREATE INDEX FOR (n:Episodic) ON (n.content_hash)",
    "CREATE INDEX FOR (n:Community) ON (n.uuid)",
    "CREATE INDEX FOR ()-[e:RELATES_TO]-() ON (e.uuid)",
    "CREATE INDEX FOR ()-[e:RELATES_TO]-() ON (e.fact_uuid)",
    "CREATE INDEX FOR ()-[e:RELATES_TO]-() ON (e.name)",
    # text_grams: CJK bigrams written beside the text (kg.store.analyzer), so particles and
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
)


def falkordb_vector_indexes(dimension: int) -> tuple[str, ...]:
    dim = _check_dimension(dimension)
    opts = f"OPTIONS {{dimension: {dim}, similarityFunction: 'cosine'}}"
    return (
        f"CREATE VECTOR INDEX FOR (n:Entity) ON (n.name_embedding) {opts}",
        f"CREATE VECTOR INDEX FOR (n:Community) ON (n.name_embedding) {opts}",
        f"CREATE VECTOR INDEX FOR (n:Episodic) ON (n.content_embedding) {opts}",
        f"CREATE VECTOR INDEX FOR ()-[e:RELATES_TO]-() ON (e.fact_embedding) {opts}",
    )


NEO4J_SCHEMA: tuple[str, ...] = (
    "CREATE CONSTRAINT kg_entity_uuid IF NOT EXISTS FOR (n:Entity) REQUIRE n.uuid IS UNIQUE",
    "CREATE CONSTRAINT kg_episodic_uuid IF NOT EXISTS FOR (n:Episodic) REQUIRE n.uuid IS UNIQUE",
    "CREATE CONSTRAINT kg_community_uuid IF NOT EXISTS FOR (n:Community) REQUIRE n.uuid IS UNIQUE",
    "CREATE INDEX kg_entity_key IF NOT EXISTS FOR (n:Entity) ON (n.group_id, n.name_key)",
    "CREATE INDEX kg_episodic_hash IF NOT EXISTS FOR (n:Episodic) ON (n.group_id, n.content_hash)",
    "CREATE INDEX kg_relates_uuid IF NOT EXISTS FOR ()-[e:RELATES_TO]-() ON (e.uuid)",
    "CREATE INDEX kg_relates_fact_uuid IF NOT EXISTS FOR ()-[e:RELATES_TO]-() ON (e.fact_uuid)",
    "CREATE INDEX kg_relates_group_name IF NOT EXISTS "
    "FOR ()-[e:RELATES_TO]-() ON (e.group_id, e.name)",
    "CREATE FULLTEXT INDEX kg_entity_text IF NOT EXISTS FOR (n:Entity) "
    "ON EACH [n.name, n.summary, n.text_grams]",
    "CREATE FULLTEXT INDEX kg_episode_text IF NOT EXISTS FOR (n:Episodic) "
    "ON EACH [n.content, n.text_grams]",
    "CREATE FULLTEXT INDEX kg_community_text IF NOT EXISTS FOR (n:Community) "
    "ON EACH [n.name, n.summary, n.text_grams]",
    "CREATE FULLTEXT INDEX kg_fact_text IF NOT EXISTS FOR ()-[e:RELATES_TO]-() "
    "ON EACH [e.fact, e.text_grams]",
)


def neo4j_vector_indexes(dimension: int) -> tuple[str, ...]:
    dim = _check_dimension(dimension)
    opts = (
        "OPTIONS {indexConfig: {`vector.dimensions`: "
        f"{dim}, `vector.similarity_function`: 'cosine'}}}}"
    )
    return (
        "CREATE VECTOR INDEX kg_entity_embedding IF NOT EXISTS FOR (n:Entity) "
        f"ON (n.name_embedding) {opts}",
        "CREATE VECTOR INDEX kg_community_embedding IF NOT EXISTS FOR (n:Community) "
        f"ON (n.name_embedding) {opts}",
        "CREATE VECTOR INDEX kg_episode_embedding IF NOT EXISTS FOR (n:Episodic) "
        f"ON (n.content_embedding) {opts}",
        "CREATE VECTOR INDEX kg_fact_embedding IF NOT EXISTS FOR ()-[e:RELATES_TO]-() "
        f"ON (e.fact_embedding) {opts}",
    )


def _check_dimension(dimension: int) -> int:
    if not isinstance(dimension, int) or isinstance(dimension, bool) or not 1 <= dimension <= 4096:
        raise ValueError(f"embedding dimension must be an integer in 1..4096, got {dimension!r}")
    return dimension
