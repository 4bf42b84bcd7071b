"""A group's full-text search inside Neo4j's shared Lucene indexes: the group key.

One Neo4j database holds every group, with one full-text index per kind of item. Filtered by
group after the search, Lucene handed kg every group's matches, so a small group beside a
large one with the same words paid for the large one's (docs/production.md). So each indexed
item carries `group_key`, one token made from its group_id (hex of a hash: the analyzer
splits a group_id at its separators, never a run of hex digits), indexed with its text, and
each query requires it with a boost of 0: Lucene collects the group's matches only, and a
zero-boost clause adds nothing to their BM25 sums, so their scores and ranks are as before.
The group filter stays after the search: two groups could in principle share a key.

A store written before keys (or by another tool, e.g. graphiti-core) is migrated when a process
first sets up the schema: its items are keyed, then each full-text index without the key is
dropped and re-created with it (`ensure_schema` in kg.store.neo4j.store).
"""

from __future__ import annotations

import hashlib
from typing import Any

from kg.schemas.graph import CommunityNode, EntityNode, EpisodicNode, FactEdge

GROUP_KEY = "group_key"
KEYED_MODELS = (EntityNode, EpisodicNode, CommunityNode, FactEdge)  # what the indexes cover
KEY_PAGE = 10_000  # items keyed per transaction by the migration

# Each full-text index (kg.store.neo4j.ddl) and what it covers, as a pattern binding `n`.
FULLTEXT_INDEXES = {
    "kg_entity_text": "(n:Entity)",
    "kg_episode_search_text": "(n:Episodic)",
    "kg_community_text": "(n:Community)",
    "kg_fact_text": "()-[n:RELATES_TO]->()",
}


def group_key(group_id: str) -> str:
    """The group's token: 32 hex digits of its SHA-256 (one Lucene token, no escaping)."""
    return hashlib.sha256(group_id.encode("utf-8")).hexdigest()[:32]


def keyed(row: dict[str, Any]) -> dict[str, Any]:
    """An encoded item's properties with its group's key added."""
    if isinstance(row.get("group_id"), str):
        row[GROUP_KEY] = group_key(row["group_id"])
    return row


def in_group(group_id: str, query: str) -> str:
    """`query` (Lucene syntax) restricted to the group's items, scored as `query` alone."""
    return f"+{GROUP_KEY}:{group_key(group_id)}^0 +({query})"


# The migration: which groups have unkeyed items of a kind, then a page of one group's keyed.
STALE_INDEXES = (
    "SHOW FULLTEXT INDEXES YIELD name, properties WHERE name STARTS WITH 'kg_' "
    f"AND NOT '{GROUP_KEY}' IN properties RETURN name"
)


def unkeyed_groups(name: str) -> str:
    return (
        f"MATCH {FULLTEXT_INDEXES[name]} WHERE n.group_id IS NOT NULL AND n.{GROUP_KEY} IS NULL "
        "RETURN DISTINCT n.group_id AS g"
    )


def key_page(name: str) -> str:
    return (
        f"MATCH {FULLTEXT_INDEXES[name]} WHERE n.group_id = $g AND n.{GROUP_KEY} IS NULL "
        f"WITH n LIMIT {KEY_PAGE} SET n.{GROUP_KEY} = $key RETURN count(n) AS n"
    )
