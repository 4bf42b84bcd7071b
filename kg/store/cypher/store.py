"""`CypherStore`: the whole `kg.schemas.store.GraphStore` in the Cypher both backends share.

Backends differ only in transport, in how time and vectors are stored, and in DDL; each
subclass supplies those (`_read`, `execute`, a `Dialect`, its DDL in `ensure_schema`) and the
store-wide operations (groups, drop, compact, close, raw queries).
"""

from __future__ import annotations

import abc

from kg.store.cypher.embedding import CypherEmbeddingModels
from kg.store.cypher.keys import CypherKeys
from kg.store.cypher.placement import CypherPlacements
from kg.store.cypher.queue import CypherQueue
from kg.store.cypher.reads import CypherReads
from kg.store.cypher.search import CypherSearch
from kg.store.cypher.transfer import CypherTransfer


class CypherStore(
    CypherReads,
    CypherTransfer,
    CypherSearch,
    CypherEmbeddingModels,
    CypherKeys,
    CypherPlacements,
    CypherQueue,
    abc.ABC,
):
    """Reads, writes, transfer, search, the group's embedding model, the API keys, the
    placement table (used on a directory store only) and the background queue over one
    transport."""
