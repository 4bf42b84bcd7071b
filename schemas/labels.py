"""The node labels kg, and Graphiti (whose graphs kg reads and writes), give their own nodes.

None of them can be an entity type: an entity labelled `Community` would be deleted by the
next community build, one labelled `Episodic` read back as an episode, `AuditEvent` as an
audit record. Every backend's Cypher matches its nodes by these labels, so the list is the
one place to add a label to (tests/test_labels.py checks that every label the stores' Cypher
uses is here).
"""

from __future__ import annotations

# The label every entity has anyway; it may appear in an entity's own label list (Graphiti
# writes it there), but it is not a type.
ENTITY_LABEL = "Entity"

RESERVED_LABELS: frozenset[str] = frozenset(
    {
        ENTITY_LABEL,
        "Episodic",  # episodes
        "Community",  # community summaries
        "AuditEvent",  # rollbacks and erasures
        "QueryStats",  # a group's stored query metrics
        "ApiStats",  # a group's stored API call metrics (kg serve)
        "EmbeddingModel",  # the model that embedded a group
        "PendingErasure",  # erasures to finish (Neo4j; FalkorDB keeps them outside graphs)
        "ApiKey",  # kg serve's API key records (kg.schemas.keys)
        "KGGroup",  # a group's version node, which fences concurrent writers (kg.versioned)
        "KGQueue",  # a group's queue lock node on Neo4j (kg.store.cypher.queue)
        "KGPlacement",  # which store server holds a group (kg.store.cypher.placement)
        "Saga",  # Graphiti's episode sequences
    }
)


def check_not_reserved(label: str) -> str:
    """An entity type (or extra entity label) that is not one of kg's own; ValueError if it is."""
    if label in RESERVED_LABELS:
        raise ValueError(
            f"entity type {label!r} is reserved: kg labels its own nodes with "
            f"{', '.join(sorted(RESERVED_LABELS))}; choose another name"
        )
    return label
