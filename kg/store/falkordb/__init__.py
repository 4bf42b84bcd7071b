"""FalkorDB: embedded (a private redis-server + module) or external; one graph per group."""

from kg.store.falkordb.dialect import FalkorDialect
from kg.store.falkordb.store import FalkorDBStore

__all__ = ["FalkorDBStore", "FalkorDialect"]
