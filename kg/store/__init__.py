"""Graph stores behind `kg.schemas.store.GraphStore`, chosen by URI.

- no URI, or `embedded` / a filesystem path: embedded FalkorDB under KG_HOME (default ~/.kg);
- `falkordb://host:port`: an external FalkorDB server;
- `bolt://`, `neo4j://`, `neo4j+s://` (and +ssc): Neo4j 5;
- with `stores` (KG_STORES), several of those, named, as one `PlacedStore` (kg.store.placed).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from kg.errors import DataDirLockedError, InputError
from kg.store.falkordb import FalkorDBStore
from kg.store.falkordb.embedded import (
    Durability,
    ProgressCallback,
    default_home,
    running_socket,
)
from kg.store.neo4j import NEO4J_SCHEMES, Neo4jStore
from kg.store.placed import Backend, PlacedStore, parse_stores

__all__ = ["FalkorDBStore", "Neo4jStore", "PlacedStore", "open_store"]


async def open_store(
    uri: str | None = None,
    *,
    home: str | Path | None = None,
    durability: Durability = "everysec",
    embedding_dim: int | None = None,
    progress: ProgressCallback | None = None,
    attach: bool = False,
    stores: str | None = None,
    placement: str | None = None,
) -> FalkorDBStore | Neo4jStore | PlacedStore:
    """`progress` hears how far the embedded server is in loading its data set. With
    `attach`, an embedded data directory a live kg process holds (`kg serve`) is reached
    through that process's server (`FalkorDBStore.attach`) instead of being refused.
    `stores` (KG_STORES: `name=uri,...`, `embedded:PATH` for an embedded one) opens them all
    as one placed store, its table in `placement` (KG_PLACEMENT; default: the first)."""
    if not stores:
        if placement:
            raise InputError("KG_PLACEMENT names a store of KG_STORES, which is not set")
        return await _open_one(uri, home, durability, embedding_dim, progress, attach)
    if uri not in (None, "", "embedded"):
        raise InputError("give KG_URI (--uri) or KG_STORES (--stores), not both")
    named = parse_stores(stores)
    opened: dict[str, Backend] = {}
    try:
        for name, each in named.items():
            embedded, _, path = each.partition("embedded:")
            uri_, home_ = (None, path) if embedded == "" and path else (each, None)
            opened[name] = await _open_one(uri_, home_, durability, embedding_dim, progress, attach)
        return PlacedStore(opened, placement or next(iter(named)))
    except BaseException:
        for one in opened.values():
            await one.close()
        raise


async def _open_one(
    uri: str | None,
    home: str | Path | None,
    durability: Durability,
    embedding_dim: int | None,
    progress: ProgressCallback | None,
    attach: bool,
) -> FalkorDBStore | Neo4jStore:
    if uri in (None, "", "embedded"):
        path = _data_dir(home)
        try:
            return await FalkorDBStore.embedded(
                path, durability=durability, embedding_dim=embedding_dim, progress=progress
            )
        except DataDirLockedError:
            running = running_socket(path) if attach else None
            if running is None:  # not attaching, or the owner has not announced it yet
                raise
        pid, socket = running
        return await FalkorDBStore.attach(
            socket, owner_pid=pid, embedding_dim=embedding_dim, durability=durability
        )
    try:
        parsed = urlparse(uri)
        parsed.port  # noqa: B018 - parsing the port is the check ('host:notaport', 99999)
    except ValueError as exc:
        raise InputError(f"store URI {uri!r}: {exc}") from None
    scheme = parsed.scheme
    if scheme in NEO4J_SCHEMES:
        return await Neo4jStore.connect(uri, embedding_dim=embedding_dim)
    if scheme in ("falkordb", "falkor", "redis"):
        return await FalkorDBStore.connect(uri, embedding_dim=embedding_dim)
    raise InputError(
        f"unsupported store URI {uri!r}: use 'embedded', falkordb://host:port, "
        f"or one of {', '.join(s + '://' for s in NEO4J_SCHEMES)}"
    )


def _data_dir(home: str | Path | None) -> Path:
    """The embedded store's directory, created if missing; an InputError if it cannot be one
    (a file, under a file, not writable), before any server is started."""
    if (str(home) if home is not None else os.environ.get("KG_HOME")) == "":
        # Path("") is the current directory: never a data directory by accident.
        raise InputError("the data directory (KG_HOME) is empty; unset it for ~/.kg")
    path = Path(home).expanduser() if home is not None else default_home()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError(f"data directory {path} exists and is not a directory") from None
    except OSError as exc:
        raise InputError(f"data directory {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError(f"data directory {path} is not writable")
    return path
