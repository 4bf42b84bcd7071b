"""Neo4j 5 over Bolt: one database for all groups, filtered by group_id."""

from kg.store.neo4j.dialect import Neo4jDialect
from kg.store.neo4j.store import NEO4J_SCHEMES, Neo4jStore

__all__ = ["NEO4J_SCHEMES", "Neo4jDialect", "Neo4jStore"]
