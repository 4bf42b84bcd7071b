"""The Cypher both backends share: one `CypherStore` built from reads, writes, transfer and
search, over two transport primitives and a `Dialect` each backend supplies."""

from kg.store.cypher.dialect import Dialect, Statement
from kg.store.cypher.store import CypherStore

__all__ = ["CypherStore", "Dialect", "Statement"]
