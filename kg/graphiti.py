"""Adopt a graph written by graphiti-core, so kg's reads, provenance and rollback work on it.

Graphiti and kg share labels and property names (Entity, Episodic, RELATES_TO, MENTIONS,
uuid, name, fact, episodes, valid_at, invalid_at, created_at, expired_at, the embeddings), so
kg can search a Graphiti graph as it stands. Three things need adopting before kg's
bi-temporal reads and rollback hold:

- **kg's keys.** Entities get `name_key`; episodes get `content_hash`, a channel and trust tier
  (message: user, json: tool, other: document; `kg.schemas.graph.foreign_channel`), status and
  extractor; edges get `fact_uuid`, `status` and the provenance of their first supporting
  episode.
- **Copy-on-close.** Graphiti closes a contradicted edge *in place*: it sets `invalid_at` and
  `expired_at` on the one edge. This loses what was believed before the closure. kg keeps the
  stored version as it was believed (open) and retires it, and adds a closed copy believed
  from the closure on. The closing episode is recovered from Graphiti's own record: the
  episode whose `entity_edges` lists the edge without being one of its sources.
- **Replayable records.** Every episode gets the structured record kg replays on rollback:
  its facts from the edges that cite it, plus, for each contradiction it caused, a statement
  that the old fact ended. Then the group is rebuilt from those records (`plan_replay`), so
  the stored versions are exactly what kg's own rules give, and stored versions that match
  keep their Graphiti uuids.

What cannot be restored, because Graphiti does not record it:
- which episode caused a *merge* of two names, so a rollback does not split entities;
- which episode closed an edge, when Graphiti did not list it in an episode's
  `entity_edges`. The closure is then kept as stated by the fact's own episode, and counted
  in the report as unattributed;
- the history of an entity's summary. kg leaves Graphiti's summaries as they are;
  `kg erase` clears every summary that names the erased subject.

Adoption is idempotent: what carries kg's keys already is left alone, so it can be re-run
after Graphiti writes more.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from kg.ingest.hashing import content_hash
from kg.ingest.names import name_key
from kg.schemas.episode import Channel, Episode, EpisodeSource, StructuredFact, TrustTier
from kg.schemas.graph import EntityNode, EpisodicNode, FactEdge, foreign_channel
from kg.schemas.ontology import Ontology
from kg.schemas.store import RecordKind, RecordTransfer
from kg.transfer import dump_all

GRAPHITI_EXTRACTOR = "graphiti-core"
SOURCES = ("message", "json", "text")  # Graphiti's episode types; anything else reads as text


class AdoptReport(BaseModel):
    group_id: str
    entities: int = 0
    episodes: int = 0
    edges: int = 0
    closures: int = 0
    closures_unattributed: int = 0
    facts_skipped: int = 0
    already_adopted: bool = False
    versions_created: int = 0
    versions_deleted: int = 0


async def plan_adoption(
    store: RecordTransfer, ontology: Ontology, group_id: str
) -> tuple[list[EntityNode], list[EpisodicNode], list[FactEdge], AdoptReport]:
    """The entities, episodes and edges to patch in place, each in kg's shape."""
    report = AdoptReport(group_id=group_id)
    entities_raw = [e async for e in dump_all(store, group_id, RecordKind.entities)]
    episodes_raw = [e async for e in dump_all(store, group_id, RecordKind.episodes)]
    edges_raw = [e async for e in dump_all(store, group_id, RecordKind.edges)]
    names = {e["uuid"]: e.get("name", "") for e in entities_raw}

    entities = []
    for e in entities_raw:
        if "name_key" in e:
            continue
        entities.append(
            EntityNode.model_validate(
                {
                    **e,
                    "name_key": name_key(e.get("name") or e["uuid"]),
                    "labels": e.get("labels", []),
                }
            )
        )

    episodes: dict[str, EpisodicNode] = {}
    fresh_episodes: set[str] = set()
    cited = {ep["uuid"]: set(ep.get("entity_edges") or []) for ep in episodes_raw}
    for ep in episodes_raw:
        if "extractor" in ep and "content_hash" in ep:
            episodes[ep["uuid"]] = EpisodicNode.model_validate(ep)
            continue
        episodes[ep["uuid"]] = _episode(ep)
        fresh_episodes.add(ep["uuid"])

    edges: list[FactEdge] = []
    records: dict[str, list[StructuredFact]] = {u: [] for u in fresh_episodes}
    endings: dict[str, list[StructuredFact]] = {}
    for raw in edges_raw:
        if "fact_uuid" in raw:
            continue
        edge, closer = _edge(raw, episodes, cited)
        edges.append(edge)
        # An end nobody is known to have caused stays with the fact's own episode.
        end = raw.get("invalid_at") if closer is None else None
        try:
            fact = _fact(edge, names, ontology, end)
        except (ValueError, ValidationError):
            report.facts_skipped += 1
            continue
        for source in edge.episodes:
            if source in records:
                records[source].append(fact)
        if raw.get("invalid_at") is not None and raw.get("expired_at") is not None:
            report.closures += 1
            if closer is None:
                report.closures_unattributed += 1
            elif closer in records and fact.valid_at and raw["invalid_at"] > fact.valid_at:
                endings.setdefault(closer, []).append(
                    fact.model_copy(update={"invalid_at": raw["invalid_at"]})
                )
    for uuid, facts in records.items():
        # An episode's own facts first, then what it ended: the same record whatever order
        # the edges were read in, so the closure (and its reason) is the same every time.
        episodes[uuid].extraction = json.dumps(
            [f.model_dump(mode="json", exclude_none=True) for f in facts + endings.get(uuid, [])],
            ensure_ascii=False,
        )
    report.entities, report.edges = len(entities), len(edges)
    report.episodes = len(fresh_episodes)
    report.already_adopted = not (entities or fresh_episodes or edges)
    return entities, [episodes[u] for u in sorted(fresh_episodes)], edges, report


def _episode(raw: dict[str, Any]) -> EpisodicNode:
    source: str = raw["source"] if raw.get("source") in SOURCES else "text"
    channel = foreign_channel(source)
    valid_at = raw.get("valid_at") or raw["created_at"]
    try:
        as_episode = Episode(
            group_id=raw["group_id"],
            source=EpisodeSource(source),
            reference_time=valid_at,
            content=raw.get("content") or "(empty)",
            source_description=raw.get("source_description", ""),
            channel=channel,
        )
        digest = content_hash(as_episode)
    except (ValueError, ValidationError):
        digest = f"graphiti:{raw['uuid']}"
    return EpisodicNode.model_validate(
        {
            **raw,
            "source": source,
            "valid_at": valid_at,
            "content": raw.get("content", ""),
            "content_hash": digest,
            "channel": channel,
            "trust": TrustTier.for_channel(channel),
            "extractor": GRAPHITI_EXTRACTOR,
            "status": "ingested",
        }
    )


def _edge(
    raw: dict[str, Any], episodes: dict[str, EpisodicNode], cited: dict[str, set[str]]
) -> tuple[FactEdge, str | None]:
    """The edge as kg's *first* version of it (open, if Graphiti closed it in place), and the
    episode that closed it, when Graphiti's records name one."""
    support = [episodes[u] for u in raw.get("episodes", []) if u in episodes]
    first = min(support, key=lambda e: e.created_at) if support else None
    valid_at = raw.get("valid_at") or (first.valid_at if first else raw["created_at"])
    closed_in_place = raw.get("invalid_at") is not None and raw.get("expired_at") is not None
    closer = _closer(raw, episodes, cited) if closed_in_place else None
    edge = FactEdge.model_validate(
        {
            **raw,
            "fact_uuid": raw["uuid"],
            "episodes": [e.uuid for e in support],
            "episode_valid_at": [e.valid_at for e in support],
            "valid_at": valid_at,
            "invalid_at": None if closed_in_place else raw.get("invalid_at"),
            "created_at": first.created_at if first else raw["created_at"],
            "expired_at": episodes[closer].created_at if closer else raw.get("expired_at"),
            "channel": first.channel if first else Channel.document,
            "trust": first.trust if first else TrustTier.for_channel(Channel.document),
            "extractor": GRAPHITI_EXTRACTOR,
            "status": "active",
        }
    )
    return edge, closer


def _closer(
    raw: dict[str, Any], episodes: dict[str, EpisodicNode], cited: dict[str, set[str]]
) -> str | None:
    """Graphiti lists an edge it invalidated in the invalidating episode's `entity_edges`."""
    sources = set(raw.get("episodes", []))
    expired: datetime = raw["expired_at"]
    found = [
        ep
        for ep in episodes.values()
        if raw["uuid"] in cited.get(ep.uuid, ())
        and ep.uuid not in sources
        and ep.created_at <= expired
    ]
    return max(found, key=lambda e: e.created_at).uuid if found else None


def _fact(
    edge: FactEdge, names: dict[str, str], ontology: Ontology, end: datetime | None
) -> StructuredFact:
    return StructuredFact(
        subject=names.get(edge.source_node_uuid) or edge.source_node_uuid,
        predicate=ontology.resolve_predicate(edge.name or "RELATES_TO").name,
        object=names.get(edge.target_node_uuid) or edge.target_node_uuid,
        valid_at=edge.valid_at,
        fact=edge.fact or None,
        invalid_at=end,
    )
