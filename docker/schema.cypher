// The constraints and indexes kg needs on Neo4j 5 (generated from kg/store/neo4j/ddl.py; a test
// keeps this file equal to it). kg creates them itself on its first write, so this file is
// for DBAs who provision ahead, e.g.:
//   cat docker/schema.cypher | docker exec -i kg-neo4j cypher-shell -u neo4j -p "$NEO4J_PASSWORD"
// The vector indexes are for 384-dimensional embeddings (all-MiniLM-L6-v2); use your
// embedder's dimension (`python -c "from kg.store.neo4j.ddl import neo4j_vector_indexes as v;
// print(*v(1536), sep=';\n')"`).
CREATE CONSTRAINT kg_entity_group_uuid IF NOT EXISTS FOR (n:Entity) REQUIRE (n.group_id, n.uuid) IS UNIQUE;
CREATE CONSTRAINT kg_episodic_group_uuid IF NOT EXISTS FOR (n:Episodic) REQUIRE (n.group_id, n.uuid) IS UNIQUE;
CREATE CONSTRAINT kg_community_group_uuid IF NOT EXISTS FOR (n:Community) REQUIRE (n.group_id, n.uuid) IS UNIQUE;
CREATE CONSTRAINT kg_group_id IF NOT EXISTS FOR (n:KGGroup) REQUIRE n.group_id IS UNIQUE;
CREATE CONSTRAINT kg_queue_group IF NOT EXISTS FOR (n:KGQueue) REQUIRE n.group_id IS UNIQUE;
CREATE CONSTRAINT kg_placement_group IF NOT EXISTS FOR (n:KGPlacement) REQUIRE n.group IS UNIQUE;
CREATE INDEX kg_episodic_group IF NOT EXISTS FOR (n:Episodic) ON (n.group_id);
CREATE INDEX kg_episodic_status IF NOT EXISTS FOR (n:Episodic) ON (n.group_id, n.status);
CREATE INDEX kg_episodic_key IF NOT EXISTS FOR (n:Episodic) ON (n.group_id, n.idempotency_key);
CREATE INDEX kg_episodic_session IF NOT EXISTS FOR (n:Episodic) ON (n.group_id, n.session_id);
CREATE INDEX kg_entity_key IF NOT EXISTS FOR (n:Entity) ON (n.group_id, n.name_key);
CREATE INDEX kg_episodic_hash IF NOT EXISTS FOR (n:Episodic) ON (n.group_id, n.content_hash);
CREATE INDEX kg_relates_uuid IF NOT EXISTS FOR ()-[e:RELATES_TO]-() ON (e.uuid);
CREATE INDEX kg_relates_fact_uuid IF NOT EXISTS FOR ()-[e:RELATES_TO]-() ON (e.fact_uuid);
CREATE INDEX kg_relates_group_name IF NOT EXISTS FOR ()-[e:RELATES_TO]-() ON (e.group_id, e.name);
CREATE FULLTEXT INDEX kg_entity_text IF NOT EXISTS FOR (n:Entity) ON EACH [n.name, n.summary, n.text_grams, n.group_key];
CREATE FULLTEXT INDEX kg_episode_search_text IF NOT EXISTS FOR (n:Episodic) ON EACH [n.search_key, n.content, n.text_grams, n.group_key];
CREATE FULLTEXT INDEX kg_community_text IF NOT EXISTS FOR (n:Community) ON EACH [n.name, n.summary, n.text_grams, n.group_key];
CREATE FULLTEXT INDEX kg_fact_text IF NOT EXISTS FOR ()-[e:RELATES_TO]-() ON EACH [e.fact, e.text_grams, e.group_key];
CREATE VECTOR INDEX kg_entity_embedding IF NOT EXISTS FOR (n:Entity) ON (n.name_embedding) OPTIONS {indexConfig: {`vector.dimensions`: 384, `vector.similarity_function`: 'cosine', `vector.quantization.enabled`: false}};
CREATE VECTOR INDEX kg_community_embedding IF NOT EXISTS FOR (n:Community) ON (n.name_embedding) OPTIONS {indexConfig: {`vector.dimensions`: 384, `vector.similarity_function`: 'cosine', `vector.quantization.enabled`: false}};
CREATE VECTOR INDEX kg_episode_key_embedding IF NOT EXISTS FOR (n:Episodic) ON (n.key_embedding) OPTIONS {indexConfig: {`vector.dimensions`: 384, `vector.similarity_function`: 'cosine', `vector.quantization.enabled`: false}};
CREATE VECTOR INDEX kg_fact_embedding IF NOT EXISTS FOR ()-[e:RELATES_TO]-() ON (e.fact_embedding) OPTIONS {indexConfig: {`vector.dimensions`: 384, `vector.similarity_function`: 'cosine', `vector.quantization.enabled`: false}};
