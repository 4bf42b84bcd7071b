"""Graph stores behind `kg.schemas.store.GraphStore`, chosen by URI.

- no URI, or `embedded` / a filesystem path: embedded FalkorDB under KG_HOME (default ~/.kg);
- `falkordb://host:port`: an external FalkorDB server;
- `bolt://`, `neo4j://`, `neo4j+s://` (and +ssc): Neo4j 5.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from kg.errors import InputError
from kg.store.falkordb import FalkorDBStore
from kg.store.falkordb.embedded import Durability, default_home
from kg.store.neo4j import NEO4J_SCHEMES, Neo4jStore

__all__ = ["FalkorDBStore", "Neo4jStore", "open_store"]


async def open_store(
    uri: str | None = None,
    *,
    home: str | Path | None = None,
    durability: Durability = "everysec",
    embedding_dim: int | None = None,
) -> FalkorDBStore | Neo4jStore:
    if uri in (None, "", "embedded"):
        path = Path(home) if home is not None else default_home()
        return await FalkorDBStore.embedded(
            path, durability=durability, embedding_dim=embedding_dim
        )
    scheme = urlparse(uri).scheme
    if scheme in NEO4J_SCHEMES:
        return await Neo4jStore.connect(uri, embedding_dim=embedding_dim)
    if scheme in ("falkordb", "falkor", "redis"):
        return await FalkorDBStore.connect(uri, embedding_dim=embedding_dim)
    raise InputError(
        f"unsupported store URI {uri!r}: use 'embedded', falkordb://host:port, "
        f"or one of {', '.join(s + '://' for s in NEO4J_SCHEMES)}"
    )
