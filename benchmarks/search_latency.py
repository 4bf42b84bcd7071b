"""Search latency by corpus size, every branch: facts_hybrid_bfs_rrf (BM25 + cosine + BFS, RRF).

    python benchmarks/search_latency.py [--sizes 10000 100000 1000000] [--queries 200]

The corpus is bulk-written straight into the embedded store in kg's own schema (entities,
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
branch report), and of two baselines in the same run: a bare PING round trip and an exact
`kg.facts(subject=...)` lookup.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kg import KG
from kg.ingest.embeddings import local_minilm
from kg.ingest.names import name_key
from kg.store.falkordb import FalkorDBStore, FalkorDialect
from kg.store.falkordb.ddl import falkordb_vector_indexes

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
DIALECT = FalkorDialect()
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


async def write_bases(store: FalkorDBStore, group: str, vectors: dict[str, list[float]]) -> None:
    """The distinct sentences' embeddings, as plain lists the bulk load copies with noise."""
    graph = store.client.select_graph(group)
    await graph.query("CREATE INDEX FOR (b:BenchBase) ON (b.text)")
    rows = [{"t": t, "v": v} for t, v in vectors.items()]
    for lo in range(0, len(rows), 500):
        await graph.query("UNWIND $rows AS r CREATE (:BenchBase {text: r.t, v: r.v})",
                          {"rows": rows[lo : lo + 500]})  # fmt: skip


async def fill(store: FalkorDBStore, group: str, start: int, stop: int, people: list[str],
               vectors: dict[str, list[float]], rng: random.Random) -> None:  # fmt: skip
    """Write facts [start, stop) in batches, each as one version of kg's schema. A fact's
    embedding is its sentence's (or, past `--distinct`, a random sentence's) plus noise, made
    server-side so the load is not bound by sending vectors as query text."""
    graph = store.client.select_graph(group)
    t0 = datetime(2015, 1, 1, tzinfo=UTC)
    texts = list(vectors)
    batch = 2000
    for lo in range(start, stop, batch):
        rows = []
        for i in range(lo, min(stop, lo + batch)):
            s, p, o, text = template(rng, people)
            base = text if text in vectors else rng.choice(texts)
            valid = t0 + timedelta(days=rng.randrange(3000))
            u = str(uuid.UUID(int=rng.getrandbits(128)))
            props = {
                "uuid": u, "fact_uuid": u, "group_id": group, "name": p, "fact": text,
                "episodes": ["bulk"], "episode_valid_at": [DIALECT.encode_time(valid)],
                "valid_at": DIALECT.encode_time(valid),
                "created_at": DIALECT.encode_time(t0 + timedelta(seconds=i)),
                "channel": "user", "trust": 3, "extractor": "bench", "status": "active",
            }  # fmt: skip
            if rng.random() < 0.2:  # a closed version: out of the default view
                props["invalid_at"] = DIALECT.encode_time(valid + timedelta(days=200))
            rows.append({"s": name_key(s), "sn": s, "o": name_key(o), "on": o, "p": props,
                         "b": base})  # fmt: skip
        await graph.query(
            "UNWIND $rows AS r MATCH (b:BenchBase {text: r.b}) "
            "MERGE (s:Entity {name_key: r.s}) ON CREATE SET s.uuid = 'e:' + r.s, s.name = r.sn, "
            "s.group_id = $g, s.created_at = $t, s.labels = [] "
            "MERGE (o:Entity {name_key: r.o}) ON CREATE SET o.uuid = 'e:' + r.o, o.name = r.on, "
            "o.group_id = $g, o.created_at = $t, o.labels = [] "
            "CREATE (s)-[e:RELATES_TO]->(o) SET e = r.p, "
            "e.fact_embedding = vecf32([x IN b.v | x + (rand() - 0.5) * 0.02])",
            {"rows": rows, "g": group, "t": DIALECT.encode_time(t0)},
        )


async def measure(kg: KG, store: FalkorDBStore, group: str, n_queries: int,
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
        await store.client.connection.ping()
        out["PING"].append((time.perf_counter() - t0) * 1000)
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--distinct", type=int, default=3000, help="distinct sentences embedded")
    args = ap.parse_args()
    rng = random.Random(7)
    people = PEOPLE + [f"Person {i}" for i in range(5000)]
    embedder = local_minilm()
    sentences = list(dict.fromkeys(template(rng, people)[3] for _ in range(args.distinct * 3)))
    sentences = sentences[: args.distinct]
    vectors = dict(zip(sentences, await embedder.embed(sentences), strict=True))
    print(f"{len(vectors)} distinct sentences embedded; {len(people)} people")
    rows = []
    with tempfile.TemporaryDirectory(prefix="kg-latency-") as home:
        async with await KG.open(home=home, embedder=embedder) as kg:
            store = kg.store
            assert isinstance(store, FalkorDBStore)
            group = "bench"
            await store.ensure_schema(group)
            await write_bases(store, group, vectors)
            have = 0
            graph = store.client.select_graph(group)
            fact_index = falkordb_vector_indexes(embedder.dim)[-1].cypher
            for size in sorted(args.sizes):
                await graph.query(fact_index.replace("CREATE", "DROP", 1).split(" OPTIONS")[0])
                t0 = time.perf_counter()
                await fill(store, group, have, size, people, vectors, rng)
                load = time.perf_counter() - t0
                t0 = time.perf_counter()
                await graph.query(fact_index)
                while True:  # a million vectors take longer than a search would wait
                    states = await graph.query("CALL db.indexes() YIELD status RETURN status")
                    if all(r[0] == "OPERATIONAL" for r in states.result_set):
                        break
                    await asyncio.sleep(1)
                build = time.perf_counter() - t0
                have = size
                m = await measure(kg, store, group, args.queries, rng)
                rows.append((size, load, m))
                memory = (await store.client.connection.info("memory"))["used_memory_human"]
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


if __name__ == "__main__":
    asyncio.run(main())
