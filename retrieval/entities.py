"""Entity expansion for episode search: the entities a query names and those of the first
pass's best hits -> their facts, ranked by similarity to the query -> the episodes those facts
cite, lifted into the episode ranking.

A multi-hop question's evidence shares an entity with the question, not its words ("What
does Caroline do to unwind?" is answered by "Caroline finds painting relaxing", extracted
from a turn that says "Finished another canvas last night!"). Facts are sharper keys than a
turn: a fact says one thing of one entity, while an episode's key mixes the turn before, the
turn and all its facts (docs/retrieval.md, "Entities named by the question").

Only groups with extracted episodes have facts to follow: the expansion starts from the
first pass's top hits, which search reads anyway, and stops, reading nothing more, when none
of them was extracted with a fact (raw turns).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

from kg.schemas.graph import EntityNode, EpisodicNode, Fact
from kg.schemas.search import SearchView
from kg.schemas.validation import name_key

# The first pass's best hits whose facts decide whether the group has facts to follow, and
# whose entities anchor the expansion (EntityAnchors.hits).
FIRST_HITS = 20
_WORD = re.compile(r"\w+")
# What an episode must be to be searched (kg.store.cypher.search.view_filter, episodes).
_SEARCHED = frozenset({"ingested", "queued", "processing"})


def _words(text: str) -> set[str]:
    return set(_WORD.findall(name_key(text)))


def has_facts(episode: EpisodicNode) -> bool:
    """Whether the episode was extracted with at least one fact (a raw turn records none)."""
    return (episode.extraction or "").strip() not in ("", "[]")


def hit_names(episodes: Iterable[EpisodicNode]) -> set[str]:
    """Name keys of the subjects and objects of the episodes' extracted facts: the entities
    of the first pass's best hits, read from the hits themselves (no store read)."""
    out: set[str] = set()
    for ep in episodes:
        if not has_facts(ep):
            continue
        assert ep.extraction is not None
        for f in json.loads(ep.extraction):
            out |= {name_key(str(f[k])) for k in ("subject", "object") if f.get(k)}
    return out


def named(query: str, entities: Iterable[EntityNode]) -> set[str]:
    """Name keys of the entities the query names: every word of the name is a word of the
    query ("Caroline" in "What did Caroline's mother give her?"), no model involved."""
    asked = _words(query)
    return {e.name_key for e in entities if (w := _words(e.name)) and w <= asked}


def anchored(facts: Iterable[Fact], anchors: set[str] | None) -> list[Fact]:
    """The facts touching an anchor (by name key), in their order; all of them when `anchors`
    is None (no filter)."""
    if anchors is None:
        return list(facts)
    return [f for f in facts if name_key(f.subject) in anchors or name_key(f.object) in anchors]


def shares(ranked: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Each fact's score as a share of the branch's range (min-max, as score fusion reads a
    branch): the best fact 1, the last in the window 0."""
    if not ranked:
        return {}
    hi = max(s for _, s in ranked)
    lo = min(s for _, s in ranked)
    span = hi - lo
    return {u: (s - lo) / span if span > 0 else 1.0 for u, s in ranked}


def cited(facts: Iterable[Fact], share: dict[str, float]) -> dict[str, float]:
    """Episode uuid -> the largest share among the facts that cite it."""
    out: dict[str, float] = {}
    for f in facts:
        s = share.get(f.edge.uuid, 0.0)
        for ep in f.edge.episodes:
            out[ep] = max(out.get(ep, 0.0), s)
    return out


def in_view(episode: EpisodicNode, view: SearchView) -> bool:
    """The episode view of every episode branch, on an episode already read: searchable status,
    not a structured one, known by `known_at`, said by `valid_at` (unless the view takes the
    whole history). A fact in view may cite an episode that is not (a restatement after
    `known_at` is appended to the version it reinforces)."""
    known = episode.queued_at or episode.created_at
    return (
        episode.status.value in _SEARCHED
        and episode.source.value != "facts"
        and known <= view.known_at
        and (view.include_history or episode.valid_at <= view.valid_at)
    )
