"""LoCoMo for the retrieval benchmarks: splits, turn texts, and a MiniLM embedding cache.

The data stay in ../shared/data (CC BY-NC: evaluation only, never copied into the repo). The
embedding cache lives outside the repo too (default /work/cache/kg-locomo, or $KG_BENCH_CACHE):
it maps the sha1 of a text to its all-MiniLM-L6-v2 vector, so iterating on fusion costs no
model time after the first run.

Splits: conversations sorted by id; the first three are the development set (anything tuned is
tuned there), the other three are held out.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DEV_CONVERSATIONS = 3
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def default_data_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "../shared/data"


def load(data_dir: str | Path | None = None) -> dict[str, Any]:
    path = Path(data_dir or default_data_dir()) / "locomo" / "locomo_dev.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def conversations(data: dict[str, Any]) -> list[str]:
    return sorted({e["conv"] for e in data["episodes"]})


def split(data: dict[str, Any]) -> dict[str, list[str]]:
    convs = conversations(data)
    return {"dev": convs[:DEV_CONVERSATIONS], "held-out": convs[DEV_CONVERSATIONS:], "all": convs}


def turn_text(ep: dict[str, Any]) -> str:
    """A dialogue turn as episode content: 'Speaker: text', plus the image caption if any."""
    text = f"{ep['speaker']}: {ep['text']}"
    if ep.get("image_caption"):
        text += f" [shares an image: {ep['image_caption']}]"
    return text


@dataclass
class Conversation:
    """One conversation's turns in order, with their observation facts and neighbours."""

    conv: str
    turns: list[dict[str, Any]]
    facts: dict[str, list[str]]  # dia_id -> observation facts drawn from that turn

    @property
    def ids(self) -> list[str]:
        return [t["dia_id"] for t in self.turns]

    def texts(self) -> list[str]:
        return [turn_text(t) for t in self.turns]

    def with_facts(self) -> list[str]:
        """K = V + fact: the turn followed by the facts extracted from it."""
        return [" ".join([turn_text(t), *self.facts.get(t["dia_id"], [])]) for t in self.turns]

    def prev_with_facts(self) -> list[str]:
        """The previous turn (same session), the turn, and the facts extracted from it."""
        return [
            " ".join([r, *self.facts.get(i, [])])
            for r, i in zip(self.round(1, 0), self.ids, strict=True)
        ]

    def round(self, before: int = 1, after: int = 1) -> list[str]:
        """Each turn with its neighbours in the same session (a round, not a lone turn)."""
        out = []
        for i, t in enumerate(self.turns):
            window = [
                turn_text(u)
                for u in self.turns[max(0, i - before) : i + after + 1]
                if u["session"] == t["session"]
            ]
            out.append(" ".join(window))
        return out


def conversation(data: dict[str, Any], conv: str) -> Conversation:
    turns = [e for e in data["episodes"] if e["conv"] == conv]
    facts: dict[str, list[str]] = {}
    for f in data["observation_facts"]:
        if f["conv"] == conv:
            for d in f["source_dia_ids"]:
                facts.setdefault(d, []).append(f["fact"])
    return Conversation(conv=conv, turns=turns, facts=facts)


def questions(data: dict[str, Any], convs: Sequence[str]) -> list[dict[str, Any]]:
    return [q for q in data["queries"] if q["conv"] in convs and q["gold_dia_ids"]]


class EmbeddingCache:
    """sha1(text) -> unit MiniLM vector, in one .npz outside the repo; encodes only misses."""

    def __init__(self, path: str | Path | None = None) -> None:
        root = Path(path or os.environ.get("KG_BENCH_CACHE", "/work/cache/kg-locomo"))
        root.mkdir(parents=True, exist_ok=True)
        self.file = root / "minilm.npz"
        self._index: dict[str, int] = {}
        self._vecs = np.zeros((0, 384), dtype=np.float32)
        if self.file.exists():
            z = np.load(self.file)
            self._vecs = z["vecs"]
            self._index = {k: i for i, k in enumerate(z["keys"].tolist())}
        self._model: Any = None

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def get(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if self.key(t) not in self._index))
        if missing:
            self._encode(missing)
        return self._vecs[[self._index[self.key(t)] for t in texts]]

    def _encode(self, texts: list[str]) -> None:
        if self._model is None:
            from kg.ingest.embeddings import local_minilm

            self._model = local_minilm()
        new = []
        for i in range(0, len(texts), 256):
            new.append(self._model._encode(texts[i : i + 256]).astype(np.float32))
        vecs = np.concatenate(new)
        start = len(self._vecs)
        self._vecs = np.concatenate([self._vecs, vecs])
        for j, t in enumerate(texts):
            self._index[self.key(t)] = start + j
        keys = np.array(sorted(self._index, key=self._index.__getitem__))
        tmp = self.file.with_suffix(".tmp.npz")
        np.savez(tmp, keys=keys, vecs=self._vecs)
        tmp.replace(self.file)


def speakers(data: dict[str, Any], conv: str) -> list[str]:
    return list(dict.fromkeys(e["speaker"] for e in data["episodes"] if e["conv"] == conv))


def foreign_pairs(data: dict[str, Any]) -> dict[str, str]:
    """conversation -> the conversation its foreign questions come from (the next one in its
    split, cyclically), so calibration on dev never sees a held-out question."""
    out = {}
    for part in ("dev", "held-out"):
        convs = split(data)[part]
        out |= {c: convs[(i + 1) % len(convs)] for i, c in enumerate(convs)}
    return out


def foreign_questions(data: dict[str, Any], conv: str, source: str) -> list[dict[str, Any]]:
    """Questions about things never said in `conv`: the answerable questions of another
    conversation, its speakers renamed to `conv`'s (first speaker to first speaker), so the
    names match and only the content is foreign. A few may happen to be answerable."""
    names = dict(zip(speakers(data, source), speakers(data, conv), strict=True))
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    out = []
    for q in data["queries"]:
        if q["conv"] == source and q["category"] != 5 and q["gold_dia_ids"]:
            text = pattern.sub(lambda m: names[m.group(1)], q["question"])
            out.append({**q, "conv": conv, "question": text, "foreign_from": source})
    return out
