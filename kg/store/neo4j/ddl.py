"""Neo4j 5 constraints and indexes, as plain Cypher text (docker/schema.cypher is this, verbatim).

Only trusted constants and validated integers are interpolated here; no user input reaches DDL.
"""

from __future__ import annotations

from kg.store.cypher.dialect import check_dimension

NEO4J_SCHEMA: tuple[str, ...] = (
    # A uuid is unique within its group, as in FalkorDB's graph-per-group: an import into a
    # new group (`kg import --into`) keeps the exported uuids on the same server. Queries
    # match uuid and group_id together, which this composite constraint's index answers.
    "CREATE CONSTRAINT kg_entity_group_uuid IF NOT EXISTS FOR (n:Entity) "
    "REQUIRE (n.group_id, n.uuid) IS UNIQUE",
    "CREATE CONSTRAINT kg_episodic_group_uuid IF NOT EXISTS FOR (n:Episodic) "
    "REQUIRE (n.group_id, n.uuid) IS UNIQUE",
    "CREATE CONSTRAINT kg_community_group_uuid IF NOT EXISTS FOR (n:Community) "
    "REQUIRE (n.group_id, n.uuid) IS UNIQUE",
    # One version node per group (kg.store.cypher.base.Fence), even when two first writes race.
    "CREATE CONSTRAINT kg_group_id IF NOT EXISTS FOR (n:KGGroup) REQUIRE n.group_id IS UNIQUE",
    # The background queue: one lock node per group serialises its transitions (claims,
    # enqueues, the leased write), and the queue's lookups are by state, key and session.
    "CREATE CONSTRAINT kg_queue_group IF NOT EXISTS FOR (n:KGQueue) REQUIRE n.group_id IS UNIQUE",
    # A deployment's placement table (kg.store.placed): one row a group, even when two
    # processes place the same new group at once.
    "CREATE CONSTRAINT kg_placement_group IF NOT EXISTS FOR (n:KGPlacement) "
    "REQUIRE n.group IS UNIQUE",
    "CREATE INDEX kg_episodic_group IF NOT EXISTS FOR (n:Episodic) ON (n.group_id)",
    "CREATE INDEX kg_episodic_status IF NOT EXISTS FOR (n:Episodic) ON (n.group_id, n.status)",
    "CREATE INDEX kg_episodic_key IF NOT EXISTS FOR (n:Episodic) "
    "ON (n.group_id, n.idempotency_key)",
    "CREATE INDEX kg_episodic_session IF NOT EXISTS FOR (n:Episodic) ON (n.group_id, n.session_id)",
    "CREATE INDEX kg_entity_key IF NOT EXISTS FOR (n:Entity) ON (n.group_id, n.name_key)",
    "CREATE INDEX kg_episodic_hash IF NOT EXISTS FOR (n:Episodic) ON (n.group_id, n.content_hash)",
    "CREATE INDEX kg_relates_uuid IF NOT EXISTS FOR ()-[e:RELATES_TO]-() ON (e.uuid)",
    "CREATE INDEX kg_relates_fact_uuid IF NOT EXISTS FOR ()-[e:RELATES_TO]-() ON (e.fact_uuid)",
    "CREATE INDEX kg_relates_group_name IF NOT EXISTS "
    "FOR ()-[e:RELATES_TO]-() ON (e.group_id, e.name)",
    # Each full-text index covers its items' group key too (kg.store.neo4j.fulltext): a
    # query names it, and Lucene collects that group's matches only.
    "CREATE FULLTEXT INDEX kg_entity_text IF NOT EXISTS FOR (n:Entity) "
    "ON EACH [n.name, n.summary, n.text_grams, n.group_key]",
    # An episode is found by its search key (kg.search_keys). Its content is indexed too, so
    # that a Graphiti graph is searchable as written, before adoption keys its episodes;
    # Lucene sums the fields, so on Neo4j a keyed turn's own words count twice.
    "CREATE FULLTEXT INDEX kg_episode_search_text IF NOT EXISTS FOR (n:Episodic) "
    "ON EACH [n.search_key, n.content, n.text_grams, n.group_key]",
    "CREATE FULLTEXT INDEX kg_community_text IF NOT EXISTS FOR (n:Community) "
    "ON EACH [n.name, n.summary, n.text_grams, n.group_key]",
    "CREATE FULLTEXT INDEX kg_fact_text IF NOT EXISTS FOR ()-[e:RELATES_TO]-() "
    "ON EACH [e.fact, e.text_grams, e.group_key]",
)


def neo4j_vector_indexes(dimension: int) -> tuple[str, ...]:
    """Unquantized: Neo4j 5's default (vector-2.0) index scores int8-quantized vectors, which
    moved a cosine of 0.77867 to 0.77795 (and 0.4607 to 0.4624) in tests/test_search.py; the
    abstention cutoff and the fused ranks are on the cosine itself, as FalkorDB gives it.
    Unquantized, the score is the float32 cosine (within 1e-6)."""
    dim = check_dimension(dimension)
    opts = (
        "OPTIONS {indexConfig: {`vector.dimensions`: "
        f"{dim}, `vector.similarity_function`: 'cosine', "
        "`vector.quantization.enabled`: false}}"
    )
    return (
        "CREATE VECTOR INDEX kg_entity_embedding IF NOT EXISTS FOR (n:Entity) "
        f"ON (n.name_embedding) {opts}",
        "CREATE VECTOR INDEX kg_community_embedding IF NOT EXISTS FOR (n:Community) "
        f"ON (n.name_embedding) {opts}",
        "CREATE VECTOR INDEX kg_episode_key_embedding IF NOT EXISTS FOR (n:Episodic) "
        f"ON (n.key_embedding) {opts}",
        "CREATE VECTOR INDEX kg_fact_embedding IF NOT EXISTS FOR ()-[e:RELATES_TO]-() "
        f"ON (e.fact_embedding) {opts}",
    )
