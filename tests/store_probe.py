"""Looking inside a store the same way on both backends: the store's public `raw_query` plus its
dialect's full-text and vector calls, never a backend's own client.

FalkorDB keeps a graph per group (`raw_query` takes the group); Neo4j keeps every group in one
database (the group argument is ignored), so every query here also filters on `group_id`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kg import KG
from kg.schemas.search import Scope
from tests import disk

_VAR = {Scope.facts: "e", Scope.entities: "n", Scope.episodes: "ep", Scope.communities: "c"}


async def _groups(kg: KG) -> list[str]:
    # Graphs another tool wrote may have no episodes yet; the store lists what it has.
    return await kg.store.groups() or ["default"]


async def graph_dump(kg: KG) -> str:
    """Every label, type and property of every node and edge of every group, and every
    pending erasure record (FalkorDB keeps those outside the graphs), lower-cased."""
    parts = [p.model_dump_json() for p in await kg.store.pending_erasures()]
    for group in await _groups(kg):
        for q in (
            "MATCH (n) WHERE n.group_id = $g OR n.group_id IS NULL "
            "RETURN labels(n) AS l, properties(n) AS p",
            "MATCH ()-[e]->() WHERE e.group_id = $g OR e.group_id IS NULL "
            "RETURN type(e) AS l, properties(e) AS p",
        ):
            rows = await kg.store.raw_query(group, q, {"g": group})
            parts.append(
                json.dumps([[r["l"], r["p"]] for r in rows], default=str, ensure_ascii=False)
            )
    return "\n".join(parts).lower()


async def fulltext_hits(kg: KG, group: str, word: str) -> int:
    """Matches for `word` in the group's fact, entity and episode full-text indexes."""
    dialect = kg.store.dialect  # type: ignore[attr-defined]
    hits = 0
    for scope in (Scope.facts, Scope.entities, Scope.episodes):
        v = _VAR[scope]
        q = (
            f"{dialect.fulltext_call(scope)} WITH {v} WHERE {v}.group_id = $g "
            f"RETURN count({v}) AS n"
        )
        [row] = await kg.store.raw_query(group, q, {"q": word, "g": group})
        hits += int(row["n"])
    return hits


async def nearest_facts(
    kg: KG, vector: list[float], k: int, group: str = "default"
) -> list[dict[str, Any]]:
    """The fact index's k nearest versions (any group, any time) as {fact, expired_at,
    similarity}, nearest first; the index ranks before anything filters."""
    dialect = kg.store.dialect  # type: ignore[attr-defined]
    q = (
        f"{dialect.vector_call(Scope.facts)} "
        "RETURN e.fact AS fact, e.expired_at AS expired_at, e.group_id AS g, score"
    )
    rows = await kg.store.raw_query(group, q, {"k": k, "v": vector})
    out = [
        {
            "fact": r["fact"],
            "expired_at": r["expired_at"],
            "group_id": r["g"],
            "similarity": dialect.similarity(float(r["score"])),
        }
        for r in rows
    ]
    return sorted(out, key=lambda r: -r["similarity"])


def files_containing(root: Path, needle: str, *, decompress: bool = True) -> list[str]:
    """Files under `root` holding `needle` (tests.disk: bytes and LZF-decompressed strings)."""
    return disk.files_containing(root, needle, decompress=decompress)


# FalkorDB's query-log task moves finished queries into each graph's stream at most this long
# after they ran (0.25 to 3 s; kg.store.falkordb.query_log).
QUERY_LOG_FLUSH_SECONDS = 3.5


async def query_logs(conn: Any) -> str:
    """What a FalkorDB server keeps of the queries it ran, lower-cased: every query-log stream
    (`telemetry{graph}`), every graph's GRAPH.SLOWLOG, and redis's SLOWLOG."""
    parts: list[str] = []
    async for key in conn.scan_iter(match="telemetry{*}"):
        if await conn.type(key) == "stream":
            parts += [json.dumps(e, ensure_ascii=False) for e in await conn.xrange(key)]
    for graph in await conn.execute_command("GRAPH.LIST"):
        parts.append(
            json.dumps(
                await conn.execute_command("GRAPH.SLOWLOG", graph), default=str, ensure_ascii=False
            )
        )
    parts.append(
        json.dumps(
            await conn.execute_command("SLOWLOG", "GET", "-1"), default=str, ensure_ascii=False
        )
    )
    return "\n".join(parts).lower()
