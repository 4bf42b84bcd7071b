"""The embedder, checked per group against the model on record: shared by writes and searches.

Vectors of two models do not compare, so a group's first embedded write records the model
(name and dimension) and every later use of the group checks it: a group embedded by another
model is refused with a clear error. One `Vectors` a process keeps what it checked, per group.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kg.errors import InputError, check_group
from kg.ingest.embeddings import recorded_embedder
from kg.schemas.embedder import Embedder, EmbeddingModel
from kg.schemas.episode import EpisodeSource
from kg.schemas.graph import EntityNode, EpisodeStatus, EpisodicNode, FactEdge
from kg.schemas.plan import EpisodeKey
from kg.schemas.store import GraphStore

EPISODE_EMBED_CHARS = 2000  # MiniLM-size models read ~256 tokens; more only costs time
log = logging.getLogger("kg")


class Vectors:
    def __init__(self, store: GraphStore, embedder: Embedder | None) -> None:
        self.store = store
        self.embedder = embedder
        self._models: dict[str, EmbeddingModel | None] = {}  # checked: on record per group

    async def embedder_for(self, group_id: str) -> Embedder | None:
        """kg's embedder, once checked against the model on record for the group."""
        if self.embedder is not None and group_id not in self._models:
            recorded = await self.store.embedding_model(group_id)
            self._check_model(group_id, recorded)
            self._models[group_id] = recorded
        return self.embedder

    def forget(self, group_id: str) -> None:
        """The group is erased: its embedding model goes with it."""
        self._models.pop(group_id, None)

    def _check_model(self, group_id: str, recorded: EmbeddingModel | None) -> None:
        if recorded is None or self.embedder is None:
            return
        given = EmbeddingModel.of(self.embedder)
        if given != recorded:
            raise InputError(
                f"group {group_id!r} was embedded with {recorded}, not with the embedder "
                f"given, {given}: open kg with the recorded model (CLI: --embedder auto)"
            )

    async def vectors(self, group_id: str, texts: list[str]) -> list[list[float]] | None:
        """Embeddings for `texts` (None without an embedder). The group's first embedded
        write records the model, just before that write."""
        embedder = await self.embedder_for(group_id)
        if embedder is None or not texts:
            return None
        vectors = await embedder.embed(texts)
        if self._models.get(group_id) is None:
            stored = await self.store.record_embedding_model(group_id, EmbeddingModel.of(embedder))
            self._check_model(group_id, stored)  # another process may have recorded first
            self._models[group_id] = stored
        return vectors

    async def embed(
        self,
        group_id: str,
        edges: list[FactEdge],
        entities: list[EntityNode] | None = None,
        episode: EpisodicNode | None = None,
        *,
        content: bool = True,
        keys: Sequence[EpisodeKey] = (),
    ) -> None:
        """Fill in missing embeddings, one batched call (rewritten versions included): an
        episode's content (unless `content` is False) and search key, and rebuilt keys."""
        if self.embedder is None:
            return
        todo_edges = [e for e in edges if e.fact_embedding is None]
        todo_entities = [n for n in entities or [] if n.name_embedding is None]
        # Structured episodes' content is their facts as JSON: the facts carry the meaning.
        ep_text = key_text = None
        if (
            episode is not None
            and episode.source is not EpisodeSource.facts
            and episode.status in (EpisodeStatus.ingested, EpisodeStatus.queued)
        ):
            ep_text = episode.content[:EPISODE_EMBED_CHARS] if content else None
            key_text = (episode.search_key or "")[:EPISODE_EMBED_CHARS] or None
        todo_keys = [k for k in keys if k.key_embedding is None]
        texts = [e.fact for e in todo_edges] + [n.name for n in todo_entities]
        texts += [t for t in (ep_text, key_text) if t]
        texts += [k.search_key[:EPISODE_EMBED_CHARS] for k in todo_keys]
        texts = list(dict.fromkeys(texts))
        embedded = await self.vectors(group_id, texts)
        if embedded is None:
            return
        vectors = dict(zip(texts, embedded, strict=True))
        for e in todo_edges:
            e.fact_embedding = vectors[e.fact]
        for n in todo_entities:
            n.name_embedding = vectors[n.name]
        if episode is not None and ep_text:
            episode.content_embedding = vectors[ep_text]
        if episode is not None and key_text:
            episode.key_embedding = vectors[key_text]
        for k in todo_keys:
            k.key_embedding = vectors[k.search_key[:EPISODE_EMBED_CHARS]]

    async def embed_rewrite(
        self, group_id: str, edges: list[FactEdge], keys: list[EpisodeKey]
    ) -> None:
        """An erasure's embeddings: its rewritten versions and its rebuilt keys."""
        await self.embed(group_id, edges, keys=keys)


async def recorded_embedder_for(store: GraphStore, group_id: str) -> Embedder | None:
    """The model recorded for the group, if it can be loaded here; else None (logged)."""
    check_group(group_id)
    recorded = await store.embedding_model(group_id)
    if recorded is None:
        return None
    embedder = recorded_embedder(recorded)
    if embedder is None:
        log.warning(
            "group %r was embedded with %s, which cannot be loaded here: running without "
            "embeddings (no cosine search); pass the embedder explicitly",
            group_id,
            recorded,
        )
    return embedder
