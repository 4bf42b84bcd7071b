"""The review queue: what kg holds back rather than believes, each with why, and the
statements that decide it.

Two kinds of item wait for a person: a *contested* claim (a lower-trust channel said
something that would close what a higher one said; kept, not believed) and a *quarantined*
item (text from an untrusted channel that read as an instruction; never a memory). kg keeps
no confidence score and does not store the facts its extractor dropped, so there is no third
kind.

A decision is never an edit: it is a user-channel structured episode that goes through the
timeline rules like any other (kg.ingest.timeline, "answers" a contested claim), so it is
provenance and the ordinary rollback undoes it, which puts the item back in the queue.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from kg.errors import InputError, NotFoundError
from kg.ingest.structured import stored_facts
from kg.schemas.episode import EpisodeSource, StructuredFact
from kg.schemas.graph import EdgeStatus, EpisodeStatus, EpisodicNode, Fact, Quarantined
from kg.schemas.store import EpisodeLog, FactReader
from kg.schemas.validation import name_key
from kg.schemas.views import EpisodeView, FactView, episode_view, fact_view

Action = Literal["accept", "reject", "edit"]
REVIEWED = "review of "  # the source description of a decision episode, then the item's id


class ReviewItem(BaseModel):
    """One thing kg holds back, with why and what a decision would state."""

    kind: Literal["contested", "quarantined"]
    id: str = Field(
        description="A contested claim's fact id, or a quarantined item's "
        "'<episode id>:<index>'; a decision names it."
    )
    text: str = Field(description="The claim, or the quarantined text, as kg read it.")
    said: StructuredFact | None = Field(
        default=None, description="The statement it would be, if it is a fact."
    )
    claim: FactView | None = Field(default=None, description="The contested version.")
    opposing: list[FactView] = Field(
        default_factory=list, description="What kg believes instead (contested claims)."
    )
    episode: EpisodeView = Field(description="The episode it came in.")
    source_description: str = ""
    quote: str | None = Field(default=None, description="What that episode said of it.")
    why: str = Field(description="The rule that held it back, in words.")


class ReviewStore(EpisodeLog, FactReader, Protocol):
    """The reads the review queue makes."""


async def review_queue(store: ReviewStore, group_id: str, limit: int) -> list[ReviewItem]:
    """Contested claims (newest first), then quarantined items not yet decided (newest
    episode first), up to `limit` of each."""
    claims = await store.contested(group_id, limit)
    came_in = {
        ep.uuid: ep
        for ep in await store.episodes(group_id, sorted({c.edge.episodes[0] for c in claims}))
    }
    items = [await _contested(store, group_id, c, came_in[c.edge.episodes[0]]) for c in claims]
    held = 0
    for ep in await store.episode_page(group_id, limit, quarantined=True):
        for index, q in enumerate(ep.quarantined()):
            item = quarantined_item(ep, index, q)
            if held < limit and not await is_decided(store, group_id, item.id):
                items.append(item)
                held += 1
    return items


async def _contested(
    store: ReviewStore, group_id: str, claim: Fact, episode: EpisodicNode
) -> ReviewItem:
    believed = await store.history(group_id, name_key(claim.subject), claim.predicate, None, 10_000)
    return contested_item(claim, opposing(claim, believed), episode)


async def find_item(store: ReviewStore, group_id: str, item_id: str) -> ReviewItem:
    """One item still waiting for review, by its id; a clear error if it is not waiting."""
    episode_id, _, index = item_id.partition(":")
    if index:
        found = await store.episodes(group_id, [episode_id])
        held = found[0].quarantined() if found else []
        if not index.isdigit() or int(index) >= len(held):
            raise NotFoundError(f"no quarantined item {item_id!r} in group {group_id!r}")
        if await is_decided(store, group_id, item_id):
            raise InputError(f"quarantined item {item_id!r} is already decided")
        return quarantined_item(found[0], int(index), held[int(index)])
    versions = await store.fact_versions(group_id, item_id)
    if not versions:
        raise NotFoundError(f"no fact {item_id!r} in group {group_id!r}")
    live = [
        v for v in versions if v.edge.expired_at is None and v.edge.status is EdgeStatus.contested
    ]
    if not live:
        raise InputError(f"fact {item_id!r} is not a contested claim waiting for review")
    episode = await store.episodes(group_id, [live[0].edge.episodes[0]])
    return await _contested(store, group_id, live[0], episode[0])


async def is_decided(store: EpisodeLog, group_id: str, item_id: str) -> bool:
    """Whether a standing decision episode (not rolled back) answers a quarantined item."""
    return any(
        ep.status is EpisodeStatus.ingested
        for ep in await store.find_episodes(group_id, REVIEWED + item_id, None)
    )


def contested_item(claim: Fact, opposing: list[Fact], episode: EpisodicNode) -> ReviewItem:
    c = claim.edge
    others = ", ".join(sorted({f"{o.edge.channel.value} channel" for o in opposing}))
    top = max((o.edge.trust for o in opposing), default=None)
    article = "An" if c.channel.value[0] in "aeiou" else "A"
    why = (
        f"{article} {c.channel.value}-channel claim (trust {c.trust.name}) may not close what the "
        f"{others or 'graph'} said (trust {top.name if top is not None else '?'}): kept as "
        "contested, not believed, until someone who outranks it decides."
    )
    return ReviewItem(
        kind="contested",
        id=c.fact_uuid,
        text=c.fact or f"{claim.subject} {claim.predicate} {claim.object}",
        said=StructuredFact(
            subject=claim.subject,
            predicate=claim.predicate,
            object=claim.object,
            valid_at=c.valid_at,
            invalid_at=c.invalid_at,
        ),
        claim=fact_view(claim),
        opposing=[fact_view(o) for o in opposing],
        episode=episode_view(episode),
        source_description=episode.source_description,
        quote=quote(episode, claim.subject, claim.predicate, claim.object),
        why=why,
    )


def quarantined_item(episode: EpisodicNode, index: int, q: Quarantined) -> ReviewItem:
    what = "fact" if q.kind == "fact" else "passage"
    return ReviewItem(
        kind="quarantined",
        id=f"{episode.uuid}:{index}",
        text=q.text,
        said=q.fact,
        episode=episode_view(episode),
        source_description=episode.source_description,
        quote=q.text,
        why=f"The instruction guard's {q.reason!r} rule: this {what} from the "
        f"{episode.channel.value} channel reads as an instruction to the assistant, so it "
        "was never made a memory.",
    )


def opposing(claim: Fact, believed: list[Fact]) -> list[Fact]:
    """The believed versions on the claim's timeline that hold at its start."""
    c = claim.edge
    holding = [
        f
        for f in believed
        if f.edge.status is EdgeStatus.active
        and f.edge.expired_at is None
        and f.edge.source_node_uuid == c.source_node_uuid
        and f.edge.name == c.name
        and f.edge.holds_at(c.valid_at)
    ]
    # A claim that ends a value kg holds opposes that value only (a multi-valued predicate's
    # other values are not in question).
    same = [f for f in holding if f.edge.target_node_uuid == c.target_node_uuid]
    return same or holding


def quote(episode: EpisodicNode, subject: str, predicate: str, obj: str) -> str | None:
    """What an episode said of a fact: its statement, or the line of its text naming it."""
    if episode.source is EpisodeSource.facts:
        try:
            said = stored_facts(episode)
        except ValueError:
            return None
        keys = {name_key(subject), name_key(obj)}
        for f in said:
            if {name_key(f.subject), name_key(f.object)} & keys:
                return f"{f.subject} {f.predicate} {f.object}"
        return None
    return passage(episode.content, obj, subject)


def passage(content: str, *names: str) -> str | None:
    """The first line of `content` that names the first of `names` found (case-insensitive)."""
    lines = [line.strip() for line in content.splitlines() if line.strip()]
    for name in names:
        for line in lines:
            if name.casefold() in line.casefold():
                return line[:500]
    return None


def decision(item: ReviewItem, action: Action, value: str | None) -> list[StructuredFact]:
    """The statements a decision makes, at the item's own valid time, so the timeline rules
    settle it: accept states the claim, edit states `value` instead, reject restates what
    is believed (contested) or states nothing (quarantined; the caller records a note)."""
    said = item.said
    if action == "edit":
        if not value or not value.strip():
            raise InputError("edit needs the right value ('object'); nothing stored")
        if said is None:
            raise InputError(
                f"item {item.id!r} is a quarantined passage, not a fact: there is no value "
                "to edit; reject it, or state the fact yourself"
            )
        return [said.model_copy(update={"object": value.strip()})]
    if value is not None:
        raise InputError(f"'object' goes with edit, not {action}")
    if action == "accept":
        if said is None:
            raise InputError(
                f"item {item.id!r} is a quarantined passage, not a fact: nothing to accept"
            )
        return [said]
    if item.kind == "quarantined":
        return []
    if not item.opposing or said is None:
        raise InputError(
            f"nothing believed opposes claim {item.id!r} now; roll back its episode to remove it"
        )
    start: datetime | None = said.valid_at
    return [
        StructuredFact(subject=o.subject, predicate=o.predicate, object=o.object, valid_at=start)
        for o in item.opposing
    ]
