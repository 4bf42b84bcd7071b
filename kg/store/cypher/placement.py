"""The placement table of a deployment on several store servers (kg.store.placed), as
`KGPlacement` nodes in the reserved namespace the API keys use (`KEYS_NAMESPACE`): on
FalkorDB a graph of its own, on Neo4j nodes whose group_id no group can have. The placed
group is the `group` property, not `group_id`: dropping the group from the directory's own
server (a delete by group_id) must not take its row."""

from __future__ import annotations

from typing import Any

from kg.errors import StoreError
from kg.schemas.keys import KEYS_NAMESPACE
from kg.schemas.store import Placement
from kg.store.cypher.base import CypherBase
from kg.store.cypher.dialect import Statement

_FIELDS = "p.group AS group_id, p.store AS store, p.moving AS moving"
_MATCH = "MATCH (p:KGPlacement) WHERE p.group_id = $ns AND p.group = $group RETURN " + _FIELDS


class CypherPlacements(CypherBase):
    def _placement(self, row: dict[str, Any]) -> Placement:
        return Placement(group_id=row["group_id"], store=row["store"], moving=bool(row["moving"]))

    async def placement(self, group_id: str) -> Placement | None:
        rows = await self._read(KEYS_NAMESPACE, _MATCH, {"ns": KEYS_NAMESPACE, "group": group_id})
        return self._placement(rows[0]) if rows else None

    async def place(self, group_id: str, store: str) -> Placement:
        merge = Statement(
            "MERGE (p:KGPlacement {group_id: $ns, group: $group}) "
            "ON CREATE SET p.store = $store, p.moving = false",
            {"ns": KEYS_NAMESPACE, "group": group_id, "store": store},
        )
        try:
            await self.execute(KEYS_NAMESPACE, [merge])
        except StoreError:
            # Two first writes raced on Neo4j: its uniqueness constraint refused the second
            # MERGE, and the row the first one wrote is the placement.
            if (found := await self.placement(group_id)) is None:
                raise
            return found
        found = await self.placement(group_id)
        assert found is not None, "a MERGE that committed left no row"
        return found

    async def set_placement(self, placement: Placement) -> None:
        await self.execute(
            KEYS_NAMESPACE,
            [
                Statement(
                    "MERGE (p:KGPlacement {group_id: $ns, group: $group}) "
                    "SET p.store = $store, p.moving = $moving",
                    {
                        "ns": KEYS_NAMESPACE,
                        "group": placement.group_id,
                        "store": placement.store,
                        "moving": placement.moving,
                    },
                )
            ],
        )

    async def placements(self) -> list[Placement]:
        rows = await self._read(
            KEYS_NAMESPACE,
            "MATCH (p:KGPlacement) WHERE p.group_id = $ns RETURN " + _FIELDS + " ORDER BY p.group",
            {"ns": KEYS_NAMESPACE},
        )
        return [self._placement(r) for r in rows]
