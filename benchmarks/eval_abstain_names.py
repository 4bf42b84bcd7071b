"""Would taking names out of a question help abstention on a `kg eval` golden set?

    python benchmarks/eval_abstain_names.py SET.jsonl [--cosine 0.49] [--unnamed 0.322]

A check over cached MiniLM vectors (locomo_data.EmbeddingCache; `KG_BENCH_CACHE` picks its
directory), not through the engine: per item, the best cosine similarity between the question
and a haystack turn said by `asked_at` (turns as `kg eval` stores them, 'Speaker: text';
facts are not embedded here). Per item type, how many a cutoff refuses, for the question as
asked (`--cosine`, what `abstain_below` compares), without the haystack's speakers' names,
and without every subject name of its facts (`--unnamed`, the cutoff locomo_abstain.py
calibrated for `cosine_unnamed` on LoCoMo's development conversations).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo_data as L

from kg.eval import load


def without(question: str, names: set[str]) -> str:
    if not names:
        return question
    alternatives = "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
    bare = re.sub(r"\b(" + alternatives + r")('s)?\b", " ", question)
    return " ".join(bare.split()) or question


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("set", type=Path)
    ap.add_argument("--cosine", type=float, default=0.49)
    ap.add_argument("--unnamed", type=float, default=0.322)
    args = ap.parse_args()
    golden = load(args.set)
    cache = L.EmbeddingCache()
    best: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for hid, haystack in golden.haystacks.items():
        turns = [t for s in haystack.sessions for t in s.turns]
        speakers = {t.speaker for t in turns if t.speaker}
        subjects = speakers | {f.subject for t in turns for f in t.facts}
        vectors = cache.get([t.content for t in turns])
        items = [i for i in golden.items if i.haystack == hid]
        for variant, names in (
            ("asked", set()),
            ("no speakers", speakers),
            ("no subjects", subjects),
        ):
            questions = cache.get([without(i.question, names) for i in items])
            for item, q in zip(items, questions, strict=True):
                said = [k for k, t in enumerate(turns) if t.at <= item.asked_at]
                best[variant][item.type.value].append(float((vectors[said] @ q).max()))
    for variant, cut in (
        ("asked", args.cosine),
        ("no speakers", args.unnamed),
        ("no subjects", args.unnamed),
    ):
        shares = [
            f"{kind} {int((np.array(v) < cut).sum())}/{len(v)}"
            for kind, v in sorted(best[variant].items())
        ]
        print(f"{variant:<12} cutoff {cut}: refused " + ", ".join(shares))


if __name__ == "__main__":
    main()
