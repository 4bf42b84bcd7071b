"""API key records (kg.schemas.keys) as `ApiKey` nodes in the reserved namespace
`KEYS_NAMESPACE`: on FalkorDB a graph of its own, on Neo4j nodes whose group_id no group
can have. Group-scoped reads filter on group_id, so they never meet a key record. A record
stored before keys had a channel has no `channel` property: it reads as the model's default."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kg.schemas.keys import KEYS_NAMESPACE, ApiKeyRecord
from kg.store.cypher.base import CypherBase
from kg.store.cypher.dialect import Statement

_FIELDS = (
    "k.key_id AS key_id, k.key_hash AS key_hash, k.scope AS scope, k.role AS role, "
    "k.channel AS channel, k.name AS name, k.created_at AS created_at, "
    "k.revoked_at AS revoked_at"
)


class CypherKeys(CypherBase):
    def _key(self, row: dict[str, Any]) -> ApiKeyRecord:
        return ApiKeyRecord.model_validate(self._decode_key(row))

    def _decode_key(self, row: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in row.items() if v is not None}
        for f in ("created_at", "revoked_at"):
            if f in out:
                out[f] = self.dialect.decode_time(out[f])
        return out

    async def put_key(self, record: ApiKeyRecord) -> None:
        props: dict[str, Any] = {
            "group_id": KEYS_NAMESPACE,
            "key_id": record.key_id,
            "key_hash": record.key_hash,
            "scope": record.scope,
            "role": record.role.value,
            "channel": record.channel.value,
            "name": record.name,
            "created_at": self.dialect.encode_time(record.created_at),
        }
        await self.execute(
            KEYS_NAMESPACE, [Statement("CREATE (k:ApiKey) SET k = $props", {"props": props})]
        )

    async def key(self, key_id: str) -> ApiKeyRecord | None:
        rows = await self._read(
            KEYS_NAMESPACE,
            "MATCH (k:ApiKey) WHERE k.group_id = $ns AND k.key_id = $key_id RETURN " + _FIELDS,
            {"ns": KEYS_NAMESPACE, "key_id": key_id},
        )
        return self._key(rows[0]) if rows else None

    async def keys(self) -> list[ApiKeyRecord]:
        rows = await self._read(
            KEYS_NAMESPACE,
            "MATCH (k:ApiKey) WHERE k.group_id = $ns RETURN "
            + _FIELDS
            + " ORDER BY k.created_at, k.key_id",
            {"ns": KEYS_NAMESPACE},
        )
        return [self._key(r) for r in rows]

    async def revoke_key(self, key_id: str, at: datetime) -> ApiKeyRecord | None:
        await self.execute(
            KEYS_NAMESPACE,
            [
                Statement(
                    "MATCH (k:ApiKey) WHERE k.group_id = $ns AND k.key_id = $key_id "
                    "AND k.revoked_at IS NULL SET k.revoked_at = $at",
                    {"ns": KEYS_NAMESPACE, "key_id": key_id, "at": self.dialect.encode_time(at)},
                )
            ],
        )
        return await self.key(key_id)
