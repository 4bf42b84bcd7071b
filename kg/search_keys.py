"""What an episode is found by: its search key (see docs/design-decisions.md, "Episode keys").

A conversation turn alone is a poor key: the answer to "What did Caroline research?" is the
turn "Researching adoption agencies!", which shares none of the question's words. So an
episode is indexed by a key, kept beside its content (which never changes):

- the turn before it in its session (usually the question it answers), when it has a session;
- its content;
- once extracted, its facts (LongMemEval's K = V + fact): "Caroline is researching adoption
  agencies" is phrased the way a question is.

The key's text is what the episodes' full-text branch scores, and its embedding what their
cosine branch compares. Writes compute it (ingest, the queue's enqueue and completion);
rollback and erasure rebuild the keys they change: a rolled-back episode's key loses its
facts, and the turn after a removed one gets a new previous turn, so no removed text stays in
any key (`rekeys`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from pydantic import ValidationError

from kg.ingest.structured import fact_text
from kg.schemas.episode import EpisodeSource, StructuredFact
from kg.schemas.graph import EpisodeStatus, EpisodicNode
from kg.schemas.plan import EpisodeKey
from kg.schemas.store import EpisodeLog

# The previous turn's share of a key: its end (the part nearest the turn), so a long
# document before a turn does not crowd the turn out of the embedding's window.
PREVIOUS_CHARS = 500
SEARCHABLE = (EpisodeStatus.ingested, EpisodeStatus.queued, EpisodeStatus.processing)


def compose(content: str, facts: Iterable[str] = (), previous: str | None = None) -> str:
    """The key's text: the previous turn, the content, the facts, one per line."""
    parts = [previous[-PREVIOUS_CHARS:]] if previous else []
    return "\n".join([*parts, content, *dict.fromkeys(facts)])


def key_facts(node: EpisodicNode) -> list[str]:
    """The sentences of the facts an ingested episode's extraction wrote (none otherwise)."""
    if node.status != EpisodeStatus.ingested or not node.extraction:
        return []
    try:
        facts = [StructuredFact.model_validate(f) for f in json.loads(node.extraction)]
    except (ValueError, ValidationError, TypeError):
        return []  # a record kg did not write (adopted): the content alone
    return [fact_text(f) for f in facts]


def keyed(node: EpisodicNode) -> bool:
    """Structured episodes are left out of the episode layer, so they get no key."""
    return node.source is not EpisodeSource.facts


async def key_for(store: EpisodeLog, node: EpisodicNode) -> str | None:
    """The key of an episode about to be written (None for a structured one)."""
    if not keyed(node):
        return None
    previous = await store.turn_before(node.group_id, node) if node.session_id else None
    return compose(node.content, key_facts(node), previous.content if previous else None)


async def rekeys(
    store: EpisodeLog, group_id: str, removed: Iterable[str], rolled_back: Iterable[str] = ()
) -> list[EpisodeKey]:
    """The keys a rewrite changes when `removed` episodes (rolled back or deleted) leave the
    searchable log: each rolled-back one becomes its content alone (its facts are undone),
    and the first surviving turn after a removed one in its session gets the turn before it
    that survives. Embeddings are filled in by the caller."""
    gone = set(removed)
    if not gone:
        return []
    back = set(rolled_back)
    episodes = await store.episodes(group_id, sorted(gone))
    out = {
        ep.uuid: EpisodeKey(uuid=ep.uuid, search_key=ep.content)
        for ep in episodes
        if ep.uuid in back and keyed(ep)
    }
    for session in sorted({ep.session_id for ep in episodes if ep.session_id}):
        turns = await store.session_turns(group_id, session)
        for i, turn in enumerate(turns):
            if turn.uuid in gone or i == 0 or turns[i - 1].uuid not in gone:
                continue
            previous = next((t for t in reversed(turns[:i]) if t.uuid not in gone), None)
            text = compose(turn.content, key_facts(turn), previous.content if previous else None)
            out[turn.uuid] = EpisodeKey(uuid=turn.uuid, search_key=text)
    return sorted(out.values(), key=lambda k: k.uuid)
