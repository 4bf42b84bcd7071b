"""Records in and out whole, for export, import and adoption: keyset pages ordered by uuid
with every property and vector, and loads that recreate them exactly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kg.schemas.episode import EpisodeSource
from kg.schemas.graph import (
    VECTOR_FIELDS,
    AuditEvent,
    CommunityNode,
    EntityNode,
    EpisodicNode,
    FactEdge,
)
from kg.schemas.plan import CommunityMembership, CommunityPlan, GroupVersion
from kg.schemas.store import Mention, Patchable, Record, RecordKind
from kg.store.cypher.base import ENDPOINT_FIELDS, with_grams
from kg.store.cypher.dialect import Statement, unindexed
from kg.store.cypher.writes import CypherWrites

# Keyset pages use the uuid index; each row is re-checked on its own value (see `unindexed`)
# and de-duplicated, since a stale index entry can return a row twice.
_NODE_PAGE = (
    "MATCH (x:{label}) WHERE x.group_id = $group_id AND x.uuid > $after "
    f"AND {unindexed('x.uuid')} > $after "
    "RETURN properties(x) AS p ORDER BY x.uuid LIMIT $page_size"
)
_DUMP = {
    RecordKind.entities: _NODE_PAGE.format(label="Entity"),
    RecordKind.episodes: _NODE_PAGE.format(label="Episodic"),
    RecordKind.communities: _NODE_PAGE.format(label="Community"),
    RecordKind.audit: _NODE_PAGE.format(label="AuditEvent"),
    RecordKind.edges: "MATCH (s:Entity)-[x:RELATES_TO]->(o:Entity) WHERE x.group_id = $group_id "
    f"AND x.uuid > $after AND {unindexed('x.uuid')} > $after "
    "RETURN properties(x) AS p, s.uuid AS source, o.uuid AS target "
    "ORDER BY x.uuid LIMIT $page_size",
    RecordKind.mentions: "MATCH (ep:Episodic)-[m:MENTIONS]->(n:Entity) "
    f"WHERE m.group_id = $group_id AND {unindexed('m.uuid')} > $after "
    "RETURN m.uuid AS uuid, ep.uuid AS episode, n.uuid AS entity, "
    "m.created_at AS created_at ORDER BY m.uuid LIMIT $page_size",
    RecordKind.members: "MATCH (c:Community)-[m:HAS_MEMBER]->(n:Entity) "
    "WHERE c.group_id = $group_id AND c.uuid + ':' + n.uuid > $after "
    "RETURN c.uuid + ':' + n.uuid AS uuid, "
    "c.uuid AS community_uuid, n.uuid AS entity_uuid ORDER BY uuid LIMIT $page_size",
}
# Relationship records (mentions, members) are dumped as flat columns, not property maps.
_FLAT = (RecordKind.mentions, RecordKind.members)
# What a patch matches, per model: (kind, pattern, embedding property).
_PATCH: dict[type[Patchable], tuple[RecordKind, str, str]] = {
    EntityNode: (RecordKind.entities, "(n:Entity {uuid: r.uuid})", "name_embedding"),
    EpisodicNode: (RecordKind.episodes, "(n:Episodic {uuid: r.uuid})", "content_embedding"),
    FactEdge: (RecordKind.edges, "()-[n:RELATES_TO {uuid: r.uuid}]->()", "fact_embedding"),
}


def with_key(ep: EpisodicNode) -> EpisodicNode:
    """An episode from a file or a tool that wrote no search key (an export from before keys,
    a graphiti-core graph) is found by its content, as it was before."""
    if ep.search_key is not None or ep.source is EpisodeSource.facts:
        return ep
    return ep.model_copy(update={"search_key": ep.content, "key_embedding": ep.content_embedding})


class CypherTransfer(CypherWrites):
    async def dump_page(
        self, group_id: str, kind: RecordKind, after: str, limit: int
    ) -> list[dict[str, Any]]:
        params = {"group_id": group_id, "after": after, "page_size": limit}
        rows = await self._read(group_id, _DUMP[kind], params)
        out = []
        seen: set[str] = set()
        for r in rows:
            key = str(r["uuid"] if kind in _FLAT else r["p"]["uuid"])
            if key in seen:
                continue
            seen.add(key)
            if kind in _FLAT:
                row = dict(r)
                if row.get("created_at") is not None:
                    row["created_at"] = self.dialect.decode_time(row["created_at"])
                out.append(row)
                continue
            props = dict(r["p"])
            row = self._decode(props)
            for key in VECTOR_FIELDS:
                if props.get(key) is not None:
                    row[key] = [float(x) for x in props[key]]
            if kind is RecordKind.edges:
                row |= {"source_node_uuid": r["source"], "target_node_uuid": r["target"]}
            out.append(row)
        return out

    def compile_patch(self, group_id: str, items: Sequence[Patchable]) -> list[Statement]:
        """Overwrite kg's properties on stored items in place (others are left as they are);
        a None field removes the property. Vectors are rewritten in the backend's form."""
        g = group_id
        out: list[Statement] = []
        for model, (kind, pattern, prop) in _PATCH.items():
            batch = [
                with_key(x) if isinstance(x, EpisodicNode) else x for x in items if type(x) is model
            ]
            if not batch:
                continue
            fields = {k for k in model.model_fields if k not in VECTOR_FIELDS}
            rows = []
            for x in batch:
                props = {k: None for k in fields - set(ENDPOINT_FIELDS)} | self._encode(
                    x, drop=ENDPOINT_FIELDS
                )
                if isinstance(x, EpisodicNode):
                    props = with_grams(props, "search_key")
                rows.append({"uuid": x.uuid, "props": props})
            out.append(
                Statement(
                    f"UNWIND ${kind}_patch AS r MATCH {pattern} WHERE n.group_id = $group_id "
                    "SET n += r.props",
                    {f"{kind}_patch": rows, "group_id": g},
                )
            )
            out += self._vectors(
                f"{kind}_patch_vectors",
                pattern,
                f"n.{prop}",
                g,
                [(x.uuid, getattr(x, prop)) for x in batch],
            )
            keys = [(x.uuid, x.key_embedding) for x in batch if isinstance(x, EpisodicNode)]
            out += self._vectors(f"{kind}_patch_keys", pattern, "n.key_embedding", g, keys)
        return out

    async def patch(
        self, group_id: str, items: Sequence[Patchable], *, base: GroupVersion | None = None
    ) -> GroupVersion:
        return await self._write(group_id, self.compile_patch(group_id, items), base)

    def compile_load(self, group_id: str, items: Sequence[Record]) -> list[Statement]:
        """Statements that recreate dumped records as they were (uuids, times, vectors), in
        load order whatever order the records come in."""
        g = group_id
        out: list[Statement] = []
        if entities := [x for x in items if isinstance(x, EntityNode)]:
            out += self._create_entities(entities, g)
        if episodes := [with_key(x) for x in items if isinstance(x, EpisodicNode)]:
            rows = [with_grams(self._encode(ep), "search_key") for ep in episodes]
            out += [
                Statement(
                    "UNWIND $load_episodes AS r CREATE (ep:Episodic) SET ep += r",
                    {"load_episodes": rows},
                ),
                *self._episode_vectors(episodes, g),
            ]
        if edges := [x for x in items if isinstance(x, FactEdge)]:
            out += self._create_edges(edges, g)
        if mentions := [x for x in items if isinstance(x, Mention)]:
            rows = [
                {**m.model_dump(), "created_at": self.dialect.encode_time(m.created_at)}
                for m in mentions
            ]
            out.append(
                Statement(
                    "UNWIND $load_mentions AS m MATCH (ep:Episodic {uuid: m.episode}), "
                    "(n:Entity {uuid: m.entity}) WHERE ep.group_id = $group_id "
                    "AND n.group_id = $group_id CREATE (ep)-[:MENTIONS {uuid: m.uuid, "
                    "group_id: $group_id, created_at: m.created_at}]->(n)",
                    {"load_mentions": rows, "group_id": g},
                )
            )
        out += self.compile_communities(
            CommunityPlan(
                group_id=g,
                create=[x for x in items if isinstance(x, CommunityNode)],
                members=[x for x in items if isinstance(x, CommunityMembership)],
            )
        )
        if audit := [x for x in items if isinstance(x, AuditEvent)]:
            out.append(
                Statement(
                    "UNWIND $load_audit AS r CREATE (a:AuditEvent) SET a += r",
                    {"load_audit": [self._encode(a) for a in audit]},
                )
            )
        return out

    async def load(
        self, group_id: str, items: Sequence[Record], *, base: GroupVersion | None = None
    ) -> GroupVersion:
        return await self._write(group_id, self.compile_load(group_id, items), base)
