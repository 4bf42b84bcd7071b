"""Abstention cutoffs on `kg eval` golden sets: calibrate on one set, report on another.

    python benchmarks/eval_abstain_joint.py DEV.jsonl HELD_OUT.jsonl [--budget 0.05 0.02]

Each set is ingested as `kg eval` ingests it (structured mode, MiniLM, one throwaway
embedded store) and every item is asked with the eval's search config and a cutoff no search
reaches, so each scope abstains and `SearchResults.abstained` reports its signal: `cosine`
(the best cosine similarity, `abstain_below`) and `joint` (`abstain_joint_below`: the best
mean of a hit's cosine similarity and its BM25 share). An item is refused when every scope
is (its context block is empty), as `kg eval` counts it. The cutoff is the highest one that
refuses at most each `--budget` of DEV's answerable items; the same cutoff is then applied to
HELD_OUT. Sets from `benchmarks/eval_set.py --convs dev` and `--convs held-out` (outside the
repository: LoCoMo is CC BY-NC).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kg import KG
from kg.eval import load
from kg.eval.runner import Runner, System, eval_config
from kg.ingest.embeddings import local_minilm
from kg.schemas.ontology import DEFAULT_ONTOLOGY

SIGNALS = {"cosine": "abstain_below", "joint": "abstain_joint_below"}


async def signals(path: Path) -> list[dict[str, Any]]:
    """Per item: its type and, per signal, the weakest scope's value (refused below it)."""
    golden = load(path)
    with tempfile.TemporaryDirectory(prefix="kg-abstain-") as home:
        onto = golden.meta.ontology or DEFAULT_ONTOLOGY
        async with await KG.open(home=home, embedder=local_minilm(), ontology=onto) as kg:
            runner = Runner(kg, golden, systems=[System.kg])
            groups = list(dict.fromkeys(i.group for i in golden.items))
            gids = {g: f"kg-{i}" for i, g in enumerate(groups)}
            await runner._ingest(kg, System.kg, gids)
            rows = []
            for item in golden.items:
                row: dict[str, Any] = {"type": str(item.type.value)}
                for name, field in SIGNALS.items():
                    cfg = eval_config(10, cosine=True, abstain_below=None)
                    cfg = cfg.model_copy(update={field: 1.0})  # every scope abstains
                    r = await kg.search(
                        item.question,
                        group_id=gids[item.group],
                        config=cfg,
                        valid_at=item.asked_at,
                        asked_at=item.asked_at,
                    )
                    row[name] = max(r.abstained.values())  # refused only if every scope is
                rows.append(row)
    return rows


def refused(rows: list[dict[str, Any]], name: str, cut: float, abstain: bool) -> str:
    mine = [r for r in rows if (r["type"] == "abstain") is abstain]
    k = sum(r[name] < cut for r in mine)
    return f"{k}/{len(mine)} ({100 * k / max(len(mine), 1):.1f}%)"


async def main(args: argparse.Namespace) -> None:
    dev, held = await signals(args.dev), await signals(args.held_out)
    for name, budget in ((n, b) for n in SIGNALS for b in args.budget):
        answerable = sorted(r[name] for r in dev if r["type"] != "abstain")
        cut = answerable[int(budget * len(answerable))]  # at most budget strictly below
        print(f"\n{name}: cutoff {cut:.3f} (refuses at most {budget:.0%} of dev answerable)")
        for split, rows in (("dev", dev), ("held-out", held)):
            print(
                f"  {split:<9} abstain items refused {refused(rows, name, cut, True):>14}"
                f"   answerable refused {refused(rows, name, cut, False):>14}"
            )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dev", type=Path)
    ap.add_argument("held_out", type=Path)
    ap.add_argument("--budget", type=float, nargs="+", default=[0.05])
    asyncio.run(main(ap.parse_args()))
