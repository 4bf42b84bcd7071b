"""One embedded FalkorDB server for many `kg` invocations in a test.

Each CLI command opens and closes its store; run through typer's CliRunner that would start
and stop a server every time (about a second each). `shared_server` starts one for the test
and points every store the CLI opens at it, so a test can run dozens of commands, or a fuzzer
hundreds, against a real store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import kg.facade
from kg.store.falkordb.store import FalkorDBStore, _pool


@contextmanager
def shared_server(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every store opened inside the block (`KG.open`, so every CLI command) uses one server,
    whatever --home or --uri says; closing such a store leaves the server running."""
    owner = asyncio.run(FalkorDBStore.embedded(home))
    server = owner.server
    assert server is not None

    async def open_shared(*_: Any, embedding_dim: int | None = None, **__: Any) -> FalkorDBStore:
        from falkordb.asyncio import FalkorDB
        from redis.asyncio import UnixDomainSocketConnection

        pool = _pool(connection_class=UnixDomainSocketConnection, path=server.socket_path)
        return FalkorDBStore(FalkorDB(connection_pool=pool), None, embedding_dim)

    monkeypatch.setattr(kg.facade, "open_store", open_shared)
    try:
        yield
    finally:
        monkeypatch.undo()
        asyncio.run(owner.close())
