"""Which model embedded a group: one small `EmbeddingModel` node a group, written with the
group's first embedded write (see `kg.vectors.Vectors.vectors`) and read by
`KG.open(embedder="auto")`."""

from __future__ import annotations

from kg.errors import StoreError
from kg.schemas.embedder import EmbeddingModel
from kg.store.cypher.base import CypherBase
from kg.store.cypher.dialect import Statement


class CypherEmbeddingModels(CypherBase):
    async def embedding_model(self, group_id: str) -> EmbeddingModel | None:
        rows = await self._read(
            group_id,
            "MATCH (m:EmbeddingModel) WHERE m.group_id = $group_id "
            "RETURN m.model AS model, m.dim AS dim",
            {"group_id": group_id},
        )
        return EmbeddingModel.model_validate(rows[0]) if rows else None

    async def record_embedding_model(self, group_id: str, model: EmbeddingModel) -> EmbeddingModel:
        merge = Statement(
            "MERGE (m:EmbeddingModel {group_id: $group_id}) "
            "ON CREATE SET m.model = $model, m.dim = $dim",
            {"group_id": group_id, "model": model.model, "dim": model.dim},
        )
        await self.execute(group_id, [merge])
        stored = await self.embedding_model(group_id)
        if stored is None:
            raise StoreError(f"group {group_id!r}: the embedding model was not recorded")
        return stored
