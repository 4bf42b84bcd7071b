"""Keeping FalkorDB's own query logs free of what kg writes, so an erasure reaches them.

FalkorDB records every finished query, with its parameters, in a per-graph stream
`telemetry{<graph>}` (GRAPH.INFO's backlog, `CMD_INFO` / `MAX_INFO_QUERIES`): a background
task moves the queries from memory into the stream every 0.25 to 3 s and trims it to about
`MAX_INFO_QUERIES` (1,000) entries. The stream is an ordinary key, so it outlives an entity's
erasure (only deleting the whole graph deletes it), and an AOF rewrite, the very compaction
that scrubs the files, writes it into the new RDB base. That is how erased names (episode
text, fact JSON, the names of corrected entities) survived an erasure: only a sequence long
enough for the task to have run after the subject's queries left them (a short test erases
before the first move).

So kg turns it off where it can and blocks it where it cannot:
- the embedded server starts with `CMD_INFO no` (MODULE_ARGS): the task never runs. Turned
  off at run time (`GRAPH.CONFIG SET CMD_INFO no`) it would keep running: FalkorDB 4.16 only
  starts the task, it never stops it;
- on an external server, kg's graphs get a plain string at their stream's key (`block`):
  FalkorDB writes the stream only to a key that is a stream or absent, and leaves a key of
  another type alone;
- an erasure also replaces any stream of the store's groups with that string, and empties
  GRAPH.SLOWLOG (the slowest queries, with their text, kept in memory per graph) and redis's
  own SLOWLOG (`scrub`), before the files are compacted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from redis.exceptions import ResponseError

# Appended to --loadmodule: FalkorDB's module arguments.
MODULE_ARGS = ("CMD_INFO", "no")
PLACEHOLDER = "kg keeps no query log here (docs/server.md, 'What erasure reaches')"


def stream_key(graph: str) -> str:
    return f"telemetry{{{graph}}}"


async def block(conn: Any, graph: str) -> None:
    """Put the placeholder at the graph's stream key: a stream there is replaced (SET takes
    a key of any type), and FalkorDB writes none while it stays."""
    await conn.set(stream_key(graph), PLACEHOLDER)


async def streams(conn: Any) -> list[str]:
    """Every query-log stream in the key space (left by a server that logged queries)."""
    found: list[str] = []
    async for key in conn.scan_iter(match="telemetry{*}", count=1000, _type="stream"):
        found.append(key)
    return sorted(found)


async def scrub(conn: Any, graphs: Iterable[str], *, own_server: bool) -> None:
    """Replace the graphs' query-log streams (with `own_server`, every one in the key space:
    the embedded server holds nothing but kg's), empty their GRAPH.SLOWLOG, and empty
    redis's SLOWLOG, which keeps a slow command's first arguments: a kg query carries its
    parameters in its text. That one is server-wide and cannot lose single entries; a server
    whose ACL refuses it keeps it (docs/server.md says so)."""
    graphs = list(graphs)
    keys = {stream_key(g) for g in graphs}
    if own_server:
        keys |= set(await streams(conn))
    for key in sorted(keys):
        await conn.set(key, PLACEHOLDER)
    for graph in graphs:
        with contextlib.suppress(ResponseError):  # no such graph: nothing logged for it
            await conn.execute_command("GRAPH.SLOWLOG", graph, "RESET")
    with contextlib.suppress(ResponseError):
        await conn.execute_command("SLOWLOG", "RESET")
