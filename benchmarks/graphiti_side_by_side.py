"""kg and graphiti-core side by side on the same LoCoMo data, in one embedded FalkorDB.

    pip install -e '.[bench]'
    python benchmarks/graphiti_side_by_side.py [DATA_DIR] [--conversations N]

Both systems get the same data with no LLM, each in graphs of its own on the same server:
the dialogue turns as episodes, and the observation facts as fact edges (subject = speaker)
with the same all-MiniLM-L6-v2 embeddings, written directly (Graphiti: `EpisodicNode.save`,
`EntityNode.save`, `EntityEdge.save`; kg: unextracted message episodes and structured facts).
Then each question goes through both searches where Graphiti's API allows:

- episodes: Graphiti's only episode method is BM25 (FalkorDB full-text, its own scorer),
  against kg's `episodes_bm25` and `episodes_hybrid_rrf`;
- facts: Graphiti's `EDGE_HYBRID_SEARCH_RRF` (BM25 + cosine, RRF) against kg's
  `facts_hybrid_rrf`, both mapped to the turns the facts came from.

Printed: recall@5/10/25/50 (share of gold turns in the top k) and p50/p95 latency per query.
Graphiti's telemetry is switched off.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ["GRAPHITI_TELEMETRY_ENABLED"] = "false"
os.environ.setdefault("OPENAI_API_KEY", "unused")  # Graphiti builds an LLM client it never calls

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from graphiti_core import Graphiti
from graphiti_core.cross_encoder.client import CrossEncoderClient
from graphiti_core.driver.falkordb_driver import FalkorDriver
from graphiti_core.edges import EntityEdge
from graphiti_core.nodes import EntityNode, EpisodeType, EpisodicNode
from graphiti_core.search.search_config import (
    EpisodeReranker,
    EpisodeSearchConfig,
    EpisodeSearchMethod,
    SearchConfig,
)
from graphiti_core.search.search_config_recipes import EDGE_HYBRID_SEARCH_RRF
from locomo_data import turn_text
from locomo_recall import KS, ingest, pct, retrieve, utc

from kg import KG
from kg.graphiti_embedder import GraphitiEmbedder
from kg.ingest.embeddings import local_minilm
from kg.store.falkordb import FalkorDBStore


def graphiti_group(conv: str) -> str:
    """Letters and digits only: with a '-' in the group id ('conv-26'), Graphiti's FalkorDB
    full-text filter (@group_id:"...") matches nothing and its BM25 branches silently
    return no hits (seen with graphiti-core 0.31.2); kg's group ids may contain '-'."""
    return "graphiti" + conv.replace("-", "")


class NoCrossEncoder(CrossEncoderClient):
    async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
        raise RuntimeError("not used: no cross-encoder recipe is run")


async def load_graphiti(g: Graphiti, data: dict[str, Any], conv: str, embedder: Any) -> None:
    driver = g.driver
    now = datetime.now(UTC)
    group = graphiti_group(conv)
    by_dia: dict[str, str] = {}
    for ep in data["episodes"]:
        if ep["conv"] != conv:
            continue
        text = turn_text(ep)
        node = EpisodicNode(
            name=ep["dia_id"],
            group_id=group,
            source=EpisodeType.message,
            source_description=f"locomo {conv} {ep['dia_id']}",
            content=text,
            valid_at=utc(ep["valid_at"]),
            created_at=now,
        )
        await node.save(driver)
        by_dia[ep["dia_id"]] = node.uuid
    facts = [f for f in data["observation_facts"] if f["conv"] == conv]
    vectors = await embedder.embed([f["fact"] for f in facts])
    speakers: dict[str, EntityNode] = {}
    for f, v in zip(facts, vectors, strict=True):
        if f["speaker"] not in speakers:
            [nv] = await embedder.embed([f["speaker"]])
            node = EntityNode(
                name=f["speaker"],
                group_id=group,
                labels=["Entity"],
                created_at=now,
                name_embedding=nv,
                summary="",
            )
            await node.save(driver)
            speakers[f["speaker"]] = node
        target = EntityNode(
            name=f["fact"][:500],
            group_id=group,
            labels=["Entity"],
            created_at=now,
            name_embedding=v,
            summary="",
        )
        await target.save(driver)
        edge = EntityEdge(
            group_id=group,
            source_node_uuid=speakers[f["speaker"]].uuid,
            target_node_uuid=target.uuid,
            created_at=now,
            name="OBSERVED",
            fact=f["fact"],
            fact_embedding=v,
            valid_at=utc(f["valid_at"]),
            episodes=[by_dia[d] for d in f["source_dia_ids"] if d in by_dia],
        )
        await edge.save(driver)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="?", default=str(Path(__file__).parents[1] / "../shared/data"))
    ap.add_argument("--conversations", type=int, default=2, help="0 = all")
    args = ap.parse_args()
    data = json.loads((Path(args.data) / "locomo" / "locomo_dev.json").read_text())
    convs = sorted({e["conv"] for e in data["episodes"]})
    if args.conversations:
        convs = convs[: args.conversations]
    queries = [q for q in data["queries"] if q["conv"] in convs and q["gold_dia_ids"]]
    embedder = local_minilm()
    episodes_bm25 = SearchConfig(
        episode_config=EpisodeSearchConfig(
            search_methods=[EpisodeSearchMethod.bm25], reranker=EpisodeReranker.rrf
        ),
        limit=50,
    )
    edges_rrf = EDGE_HYBRID_SEARCH_RRF.model_copy(update={"limit": 50})

    with tempfile.TemporaryDirectory(prefix="kg-vs-graphiti-") as home:
        async with await KG.open(home=home, embedder=embedder) as kg:
            await ingest(kg, data, convs)
            assert isinstance(kg.store, FalkorDBStore)
            falkor = kg.store.client
            graphiti: dict[str, Graphiti] = {}
            for conv in convs:
                driver = FalkorDriver(falkor_db=falkor, database=graphiti_group(conv))
                g = Graphiti(
                    graph_driver=driver,
                    embedder=GraphitiEmbedder(embedder),
                    cross_encoder=NoCrossEncoder(),
                )
                await g.build_indices_and_constraints()
                await load_graphiti(g, data, conv, embedder)
                graphiti[conv] = g
            print(f"conversations: {len(convs)}, questions with evidence: {len(queries)}")

            async def g_episodes(q: dict[str, Any]) -> list[str]:
                g = graphiti[q["conv"]]
                r = await g.search_(
                    q["question"], config=episodes_bm25, group_ids=[graphiti_group(q["conv"])]
                )
                return [e.name for e in r.episodes]

            async def g_facts(q: dict[str, Any]) -> list[str]:
                g = graphiti[q["conv"]]
                r = await g.search_(
                    q["question"], config=edges_rrf, group_ids=[graphiti_group(q["conv"])]
                )
                eps = await EpisodicNode.get_by_uuids(
                    g.driver, sorted({u for e in r.edges for u in e.episodes})
                )
                names = {e.uuid: e.name for e in eps}
                return list(
                    dict.fromkeys(names[u] for e in r.edges for u in e.episodes if u in names)
                )

            methods = {
                "graphiti episodes (BM25)": g_episodes,
                "kg episodes_bm25": lambda q: retrieve(kg, "episodes_bm25", q),
                "kg episodes_hybrid_rrf": lambda q: retrieve(kg, "episodes_hybrid_rrf", q),
                "graphiti EDGE_HYBRID_SEARCH_RRF → turns": g_facts,
                "kg facts_hybrid_rrf → turns": lambda q: retrieve(kg, "facts:facts_hybrid_rrf", q),
            }
            recall: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
            latency: dict[str, list[float]] = defaultdict(list)
            for q in queries:
                gold = set(q["gold_dia_ids"])
                for name, run in methods.items():
                    t0 = time.perf_counter()
                    got = await run(q)
                    latency[name].append((time.perf_counter() - t0) * 1000)
                    for k in KS:
                        recall[name][k].append(len(gold & set(got[:k])) / len(gold))

    print(f"\n| method | {' | '.join(f'R@{k}' for k in KS)} | p50 ms | p95 ms |")
    print("|---|" + "---|" * (len(KS) + 2))
    for name in methods:
        cells = " | ".join(f"{100 * statistics.mean(recall[name][k]):.1f}" for k in KS)
        print(f"| {name} | {cells} | {pct(latency[name], 50):.1f} | {pct(latency[name], 95):.1f} |")


if __name__ == "__main__":
    asyncio.run(main())
