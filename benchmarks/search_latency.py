"""Search latency by corpus size, every branch: facts_hybrid_bfs_rrf (BM25 + cosine + BFS, RRF).

    python benchmarks/search_latency.py [--sizes 10000 100000 1000000] [--queries 200]
        [--backend falkordb|neo4j|both]

The corpus is bulk-written straight into the store `--backend` names (benchmarks/bench_store.py)
in kg's own schema (entities,
fact versions with every bi-temporal field, embeddings), because pushing a million facts
through `add_episode` would measure ingest, not search. Facts come from templates over a few
thousand people, places, employers and hobbies, so full-text terms have a realistic spread
of frequencies. Their embeddings are the real all-MiniLM-L6-v2 embeddings of the distinct
template sentences (up to `--distinct` of them), each written with a little noise (added
server-side) so no two vectors are identical; a fifth of the facts are closed versions
(invalid_at set), which the default view must filter out. Queries are real sentences
embedded by the same model.

The fact vector index is dropped while a size loads and rebuilt after it (the usual bulk-load
order: inserting a million vectors one by one into a live HNSW index is what timed out the
load before); the rebuild time and the server's memory are printed with each size.

Printed per size: p50 / p95 of the whole search, of each branch (from the search's own
branch report), and of two baselines in the same run: a bare PING round trip (Neo4j:
`RETURN 1`) and an exact `kg.facts(subject=...)` lookup.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_store import add_store_options, bench_kg, describe, ping, run_per_backend

from kg import KG
from kg.ingest.embeddings import local_minilm
from kg.ingest.names import name_key
from kg.store.cypher.dialect import Dialect
from kg.store.falkordb import FalkorDBStore
from kg.store.falkordb.ddl import falkordb_vector_indexes
from kg.store.neo4j.ddl import neo4j_vector_indexes

PEOPLE = [f"{a} {b}" for a in ("Minji", "Jun", "Alice", "Bob", "Carol", "Dana", "Eitan", "Femi",
          "Grace", "Hiro", "Ines", "Jonas") for b in ("Kim", "Lee", "Park", "Smith", "Garcia",
          "Chen", "Okafor", "Müller", "Rossi", "Sato")]  # fmt: skip
CITIES = ["Seoul", "Busan", "Daegu", "Lima", "Lagos", "Oslo", "Kyoto", "Porto", "Quito", "Perth",
          "Austin", "Lyon", "Bergen", "Cusco", "Hanoi", "Tartu", "Malmo", "Leeds"]  # fmt: skip
ORGS = ["Naver", "Kakao", "Acme", "Globex", "Initech", "Umbrella", "Hooli", "Stark", "Wayne",
        "Cyberdyne", "Tyrell", "Soylent"]  # fmt: skip
HOBBIES = ["jazz music", "hiking", "chess", "pottery", "surfing", "baking bread",
           "birdwatching", "rock climbing", "watercolour painting", "sci-fi novels", "tennis",
           "photography"]  # fmt: skip
QUERIES = ["Where does Minji live now?", "Who works at Naver?", "Which hobbies does Bob have?",
           "Who moved to Busan?", "Does anyone enjoy painting?", "Carol Chen's employer",
           "people who like jazz", "Who lives in Oslo?", "climbing and outdoor sports",
           "Jun Park's friends"]  # fmt: skip
RECIPE = "facts_hybrid_bfs_rrf"


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def template(rng: random.Random, people: list[str]) -> tuple[str, str, str, str]:
    s = rng.choice(people)
    kind = rng.random()
    if kind < 0.35:
        o = rng.choice(CITIES)
        return s, "LIVES_IN", o, f"{s} lives in {o}"
    if kind < 0.55:
        o = rng.choice(ORGS)
        return s, "WORKS_AT", o, f"{s} works at {o}"
    if kind < 0.8:
        o = rng.choice(HOBBIES)
        return s, "LIKES", o, f"{s} likes {o}"
    o = rng.choice(people)
    return s, "KNOWS", o, f"{s} knows {o}"


class Bulk:
    """Bulk writes straight into kg's schema, and the fact vector index's drop and rebuild, on
    either backend (FalkorDB: a graph per group, vecf32; Neo4j: one database, plain lists)."""

    def __init__(self, kg: KG, group: str, dim: int) -> None:
        self.kg, self.group, self.dim = kg, group, dim
        self.store = kg.store
        self.dialect: Dialect = kg.store.dialect  # type: ignore[attr-defined]
        self.neo4j = not isinstance(kg.store, FalkorDBStore)

    async def q(self, query: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return await self.store.raw_query(self.group, query, params or {}, write=True)

    async def write_bases(self, vectors: dict[str, list[float]]) -> None:
        """The distinct sentences' embeddings, as plain lists the bulk load copies with noise."""
        await self.q("CREATE INDEX bench_base IF NOT EXISTS FOR (b:BenchBase) ON (b.text)"
                     if self.neo4j else "CREATE INDEX FOR (b:BenchBase) ON (b.text)")  # fmt: skip
        rows = [{"t": t, "v": v} for t, v in vectors.items()]
        for lo in range(0, len(rows), 500):
            await self.q("UNWIND $rows AS r CREATE (:BenchBase {text: r.t, v: r.v, group_id: $g})",
                         {"rows": rows[lo : lo + 500], "g": self.group})  # fmt: skip

    def _fact_index(self) -> str:
        if self.neo4j:
            return neo4j_vector_indexes(self.dim)[-1]
        return falkordb_vector_indexes(self.dim)[-1].cypher

    async def drop_fact_index(self) -> None:
        if self.neo4j:
            await self.q("DROP INDEX kg_fact_embedding IF EXISTS")
        else:
            await self.q(self._fact_index().replace("CREATE", "DROP", 1).split(" OPTIONS")[0])

    async def build_fact_index(self) -> None:
        await self.q(self._fact_index())
        states = ("SHOW INDEXES YIELD state RETURN state AS s" if self.neo4j
                  else "CALL db.indexes() YIELD status RETURN status AS s")  # fmt: skip
        ready = "ONLINE" if self.neo4j else "OPERATIONAL"
        while True:  # a million vectors take longer than a search would wait
            if all(r["s"] == ready for r in await self.q(states)):
                return
            await asyncio.sleep(1)

    async def memory(self) -> str:
        if self.neo4j:
            return "n/a (JVM heap and page cache)"
        return str((await self.store.client.connection.info("memory"))["used_memory_human"])

    async def fill(self, start: int, stop: int, people: list[str],
                   vectors: dict[str, list[float]], rng: random.Random) -> None:  # fmt: skip
        """Write facts [start, stop) in batches, each as one version of kg's schema. A fact's
        embedding is its sentence's (or, past `--distinct`, a random sentence's) plus noise,
        made server-side so the load is not bound by sending vectors as query text."""
        enc = self.dialect.encode_time
        t0 = datetime(2015, 1, 1, tzinfo=UTC)
        texts = list(vectors)
        vector = self.dialect.vector("[x IN b.v | x + (rand() - 0.5) * 0.02]")
        batch = 2000
        for lo in range(start, stop, batch):
            rows = []
            for i in range(lo, min(stop, lo + batch)):
                s, p, o, text = template(rng, people)
                base = text if text in vectors else rng.choice(texts)
                valid = t0 + timedelta(days=rng.randrange(3000))
                u = str(uuid.UUID(int=rng.getrandbits(128)))
                props = {
                    "uuid": u, "fact_uuid": u, "group_id": self.group, "name": p, "fact": text,
                    "episodes": ["bulk"], "episode_valid_at": [enc(valid)],
                    "valid_at": enc(valid), "created_at": enc(t0 + timedelta(seconds=i)),
                    "channel": "user", "trust": 3, "extractor": "bench", "status": "active",
                }  # fmt: skip
                if rng.random() < 0.2:  # a closed version: out of the default view
                    props["invalid_at"] = enc(valid + timedelta(days=200))
                rows.append({"s": name_key(s), "sn": s, "o": name_key(o), "on": o, "p": props,
                             "b": base})  # fmt: skip
            await self.q(
                "UNWIND $rows AS r MATCH (b:BenchBase {text: r.b}) "
                "MERGE (s:Entity {group_id: $g, name_key: r.s}) ON CREATE SET "
                "s.uuid = 'e:' + r.s, s.name = r.sn, s.created_at = $t, s.labels = [] "
                "MERGE (o:Entity {group_id: $g, name_key: r.o}) ON CREATE SET "
                "o.uuid = 'e:' + r.o, o.name = r.on, o.created_at = $t, o.labels = [] "
                f"CREATE (s)-[e:RELATES_TO]->(o) SET e = r.p, e.fact_embedding = {vector}",
                {"rows": rows, "g": self.group, "t": enc(t0)},
            )


async def measure(kg: KG, group: str, n_queries: int,
                  rng: random.Random) -> dict[str, list[float]]:  # fmt: skip
    out: dict[str, list[float]] = {"search": [], "bm25": [], "cosine": [], "bfs": [],
                                   "facts lookup": [], "PING": []}  # fmt: skip
    await kg.search("warm up", group_id=group, recipe=RECIPE)
    for i in range(n_queries):
        q = QUERIES[i % len(QUERIES)]
        t0 = time.perf_counter()
        r = await kg.search(q, group_id=group, recipe=RECIPE)
        out["search"].append((time.perf_counter() - t0) * 1000)
        for b in r.branches:
            out[b.method].append(b.latency_ms)
        t0 = time.perf_counter()
        await kg.facts(group_id=group, subject=rng.choice(PEOPLE))
        out["facts lookup"].append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        await ping(kg)
        out["PING"].append((time.perf_counter() - t0) * 1000)
    return out


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(7)
    people = PEOPLE + [f"Person {i}" for i in range(5000)]
    embedder = local_minilm()
    sentences = list(dict.fromkeys(template(rng, people)[3] for _ in range(args.distinct * 3)))
    sentences = sentences[: args.distinct]
    vectors = dict(zip(sentences, await embedder.embed(sentences), strict=True))
    print(f"{len(vectors)} distinct sentences embedded; {len(people)} people")
    rows = []
    async with bench_kg(args, embedder=embedder) as kg:
        print(f"store: {await describe(kg, args)}")
        group = "bench"
        await kg.store.ensure_schema(group)
        bulk = Bulk(kg, group, embedder.dim)
        await bulk.write_bases(vectors)
        await kg.store.raw_query(
            group, "CREATE (:Episodic {uuid: 'bench', group_id: $g})", {"g": group}, write=True
        )  # the group exists: it has an episode
        have = 0
        for size in sorted(args.sizes):
            await bulk.drop_fact_index()
            t0 = time.perf_counter()
            await bulk.fill(have, size, people, vectors, rng)
            load = time.perf_counter() - t0
            t0 = time.perf_counter()
            await bulk.build_fact_index()
            build = time.perf_counter() - t0
            have = size
            m = await measure(kg, group, args.queries, rng)
            rows.append((size, load, m))
            memory = await bulk.memory()
            cells = "  ".join(f"{k} {pct(v, 50):.1f}/{pct(v, 95):.1f}" for k, v in m.items())
            print(f"{size:>9,} facts (loaded in {load:.0f} s, vector index built in "
                  f"{build:.0f} s, server memory {memory}): p50/p95 ms  {cells}",
                  flush=True)  # fmt: skip
    keys = ["search", "bm25", "cosine", "bfs", "facts lookup", "PING"]
    print("\n| facts | " + " | ".join(f"{k} p50 / p95 ms" for k in keys) + " |")
    print("|---|" + "---|" * len(keys))
    for size, _, m in rows:
        print(f"| {size:,} | " + " | ".join(f"{pct(m[k], 50):.1f} / {pct(m[k], 95):.1f}"
                                            for k in keys) + " |")  # fmt: skip


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--distinct", type=int, default=3000, help="distinct sentences embedded")
    add_store_options(ap)
    return ap


if __name__ == "__main__":
    run_per_backend(parser(), main)
