"""Structured episodes (facts given as subject / predicate / object) -> write plan, with no LLM.

Entities resolve by normalised name within the group; predicates resolve through the ontology,
whose cardinality decides whether a new value supersedes the current one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime

from kg.ingest.hashing import content_hash
from kg.ingest.names import name_key
from kg.ingest.timeline import NewFact, TimelineWriter
from kg.schemas.episode import Episode, EpisodeSource, StructuredFact
from kg.schemas.graph import EntityNode, EpisodicNode
from kg.schemas.ontology import Ontology, Predicate
from kg.schemas.plan import PlanSummary, WritePlan
from kg.schemas.store import (
    NamedTimeline,
    PlanningNames,
    Timelines,
)
from kg.schemas.validation import STORED

STRUCTURED_EXTRACTOR = "kg.structured/1"
# A version-4 UUID's fixed bits (RFC 9562): the version nibble 4, the variant bits 10.
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)


def new_uuid() -> str:
    """`str(uuid.uuid4())`, the same random version-4 text, made without building a UUID
    object: a structured episode asks for about ten."""
    n = int.from_bytes(os.urandom(16)) & _UUID4_CLEAR | _UUID4_SET
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def episodic_node(
    episode: Episode,
    *,
    uuid: str,
    now: datetime,
    extractor: str,
    content: str | None = None,
    digest: str | None = None,
) -> EpisodicNode:
    """`digest`: the episode's `content_hash`, when the caller has made it already."""
    return EpisodicNode(
        uuid=uuid,
        group_id=episode.group_id,
        name=episode.name,
        source=episode.source,
        source_description=episode.source_description,
        content=episode.content if content is None else content,
        content_hash=content_hash(episode) if digest is None else digest,
        valid_at=episode.reference_time,
        created_at=now,
        channel=episode.channel,
        trust=episode.trust_tier,
        extractor=extractor,
        idempotency_key=episode.idempotency_key,
        session_id=episode.session_id,
    )


def fact_text(f: StructuredFact, predicate: str | None = None) -> str:
    """The fact's own sentence, or one made of its parts ('Alice lives in Seoul'); `predicate`
    is the ontology's name for it, when `f` may still carry an alias."""
    return (
        f.fact or f"{f.subject} {(predicate or f.predicate).lower().replace('_', ' ')} {f.object}"
    )


def new_fact(
    f: StructuredFact, pred: Predicate, entities: dict[str, EntityNode], reference_time: datetime
) -> NewFact:
    return NewFact(
        source_uuid=entities[name_key(f.subject)].uuid,
        target_uuid=entities[name_key(f.object)].uuid,
        predicate=pred.name,
        single_valued=pred.single_valued,
        fact=fact_text(f, pred.name),
        valid_at=f.valid_at or reference_time,
        invalid_at=f.invalid_at,
    )


def stored_facts(episode: EpisodicNode) -> list[StructuredFact]:
    """The facts an episode contributed: its content (structured) or its stored extraction."""
    if episode.source is EpisodeSource.facts:
        record = episode.content
    elif episode.extraction is not None:
        record = episode.extraction
    else:
        raise ValueError(
            f"episode {episode.uuid} is a {episode.source.value!r} episode without a stored "
            "extraction; only structured 'facts' episodes and LLM episodes that kept their "
            "extraction can be replayed"
        )
    return [StructuredFact.model_validate(row, context=STORED) for row in json.loads(record)]


def check_structured(episode: Episode, ontology: Ontology) -> list[Predicate]:
    """Validate everything the ontology decides before any read or write; raises ValueError."""
    if episode.source is not EpisodeSource.facts:
        raise ValueError(f"expected a 'facts' episode, got {episode.source.value!r}")
    predicates = []
    for i, f in enumerate(episode.facts):
        try:
            predicates.append(ontology.resolve_predicate(f.predicate))
            ontology.resolve_entity_type(f.subject_type)
            ontology.resolve_entity_type(f.object_type)
        except ValueError as exc:
            raise ValueError(f"facts[{i}]: {exc}") from exc
    return predicates


def planning_names(
    episodes: Episode | list[Episode], ontology: Ontology, digests: list[str] | None = None
) -> PlanningNames:
    """What `plan_facts` will read for the episodes' facts, and their duplicates: what one
    `PlanningRead.planning_reads` fetches before planning them (see `BatchTimelines`).
    `digests`: the episodes' content hashes, when the caller has made them already."""
    episodes = [episodes] if isinstance(episodes, Episode) else episodes
    if digests is None:
        digests = [content_hash(e) for e in episodes]
    keys: dict[str, None] = {}
    since: dict[tuple[str, str, str | None], datetime] = {}
    for episode in episodes:
        for f in episode.facts:
            pred = ontology.resolve_predicate(f.predicate)
            subject, obj = name_key(f.subject), name_key(f.object)
            keys[subject] = keys[obj] = None
            named = (subject, pred.name, None if pred.single_valued else obj)
            valid_at = f.valid_at or episode.reference_time
            since[named] = min(since.get(named, valid_at), valid_at)
    return PlanningNames(
        content_hashes=tuple(dict.fromkeys(digests)),
        idempotency_keys=tuple(
            dict.fromkeys(e.idempotency_key for e in episodes if e.idempotency_key is not None)
        ),
        name_keys=tuple(sorted(keys)),
        timelines=tuple(
            NamedTimeline(subject_key=s, predicate=p, object_key=o, since=t)
            for (s, p, o), t in since.items()
        ),
    )


async def plan_structured_episode(
    episode: Episode,
    store: Timelines,
    ontology: Ontology,
    now: datetime,
    new_id: Callable[[], str] = new_uuid,
    *,
    facts: list[StructuredFact] | None = None,
    uuid: str | None = None,
    digest: str | None = None,
) -> tuple[WritePlan, PlanSummary]:
    """`facts`, when given, is what to write of the episode's facts (the instruction guard
    holds back the rest); the episode's content, which replay reads, records only those.
    `uuid` is the episode's when it is already stored (a queued one); `digest` its content
    hash when the caller has made it (`planning_names` needs it first)."""
    predicates: list[Predicate] | None = check_structured(episode, ontology)
    if facts is None:
        facts = list(episode.facts)
    elif len(facts) != len(episode.facts) or any(
        a is not b for a, b in zip(facts, episode.facts, strict=True)
    ):
        predicates = None  # some held back: resolved again for those kept
    facts_json = json.dumps(
        [f.model_dump(mode="json", exclude_none=True) for f in facts], ensure_ascii=False
    )
    node = episodic_node(
        episode,
        uuid=uuid or new_id(),
        now=now,
        extractor=STRUCTURED_EXTRACTOR,
        content=facts_json,
        digest=digest,
    )
    return await plan_facts(node, facts, store, ontology, now, new_id, predicates)


async def plan_facts(
    node: EpisodicNode,
    facts: list[StructuredFact],
    store: Timelines,
    ontology: Ontology,
    now: datetime,
    new_id: Callable[[], str] = new_uuid,
    predicates: list[Predicate] | None = None,
) -> tuple[WritePlan, PlanSummary]:
    """Resolve entities and place each fact on its timeline; `node` is the episode to write.
    `predicates`: the facts' own, when the caller resolved them already."""
    group = node.group_id
    if predicates is None:
        predicates = [ontology.resolve_predicate(f.predicate) for f in facts]

    # Entities: one lookup for every name the episode uses.
    wanted: dict[str, tuple[str, str | None]] = {}
    for f in facts:
        for raw, typ in ((f.subject, f.subject_type), (f.object, f.object_type)):
            key = name_key(raw)
            if key not in wanted or wanted[key][1] is None:
                wanted[key] = (raw, ontology.resolve_entity_type(typ))
    existing = {e.name_key: e for e in await store.entities_by_key(group, sorted(wanted))}
    summary = PlanSummary(entities_matched=len(existing))
    new_entities: list[EntityNode] = []
    entities = dict(existing)
    for key, (raw, typ) in wanted.items():
        if key in entities:
            continue
        entity = EntityNode(
            uuid=new_id(),
            group_id=group,
            name=raw,
            name_key=key,
            labels=[typ] if typ else [],
            created_at=now,
        )
        entities[key] = entity
        new_entities.append(entity)
    summary.entities_added = len(new_entities)

    # Contradiction candidates: only live versions on the timelines this episode touches.
    news = [new_fact(f, p, entities, node.valid_at) for f, p in zip(facts, predicates, strict=True)]
    live = await store.live_edges(group, [n.key for n in news])
    writer = TimelineWriter(
        episode_uuid=node.uuid,
        now=now,
        channel=node.channel.value,
        trust=int(node.trust),
        extractor=node.extractor,
        group_id=group,
        new_id=new_id,
        live={e.uuid: e for e in live},
        summary=summary,
    )
    for n in news:
        writer.add(n)

    plan = WritePlan(
        group_id=group,
        episode=node,
        new_entities=new_entities,
        mentions=sorted({entities[k].uuid for k in wanted}),
        new_edges=list(writer.new_edges.values()),
        retirements=writer.retirements,
        reinforcements=writer.reinforcements,
    )
    return plan, writer.summary
