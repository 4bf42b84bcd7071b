"""Query -> branches -> fusion -> rerank -> cutoff, per scope (facts, entities, episodes,
communities). Talks to the graph only through `kg.schemas.store.SearchIndex`.

Branches of a scope run concurrently, after the query is embedded (not beside it: see `run`);
BFS runs after them when it must be seeded from their hits. Branches rank by uuid and score
only: items are read afterwards, for the candidates that can still make the final top k
(`_hydrate`), not for every candidate of every branch. Every branch reports its hit count and
latency, so a dead branch (no embedder, an empty index, a query of stop words) shows up in
`SearchResults.branches` instead of passing silently.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

from kg.retrieval.config import (
    EntityAnchors,
    Fusion,
    Method,
    Reranker,
    ScopeConfig,
    SearchConfig,
)
from kg.retrieval.dated import asks_when, says_when
from kg.retrieval.entities import (
    FIRST_HITS,
    anchored,
    cited,
    has_facts,
    hit_names,
    in_view,
    named,
    shares,
)
from kg.retrieval.fusion import mmr, rrf, score_fusion
from kg.retrieval.query import keyword_query
from kg.retrieval.rerankers import CrossEncoder, by_key
from kg.retrieval.results import (
    AbstainCheck,
    BranchReport,
    CommunityHit,
    EntityHit,
    EpisodeHit,
    FactHit,
    SearchResults,
)
from kg.retrieval.when import QueryTime, TimeExpression, anchored_window, read_time
from kg.schemas.embedder import Embedder
from kg.schemas.episode import TrustTier
from kg.schemas.graph import CommunityNode, EntityNode, EpisodicNode, Fact
from kg.schemas.ontology import Ontology
from kg.schemas.search import Scope, Scored, SearchItem, SearchView
from kg.schemas.store import SearchIndex

# Said the same on every surface; each adds its own way to configure one (a CLI flag, a
# KG.open argument, a kg serve option), so none is told another surface's remedy.
NO_EMBEDDER = "no embedder configured"

T = TypeVar("T")


class SearchReads(SearchIndex, Protocol):
    """The search reads, plus episodes by uuid: a fact's trust is the highest tier among the
    episodes that support it."""

    async def episodes(self, group_id: str, uuids: list[str]) -> list[EpisodicNode]: ...


class SearchError(ValueError):
    """The search cannot run as configured (e.g. a reranker whose model is missing)."""


@dataclass
class _Scope:
    """Candidates of one scope as the branches found them."""

    items: dict[str, SearchItem | None] = field(default_factory=dict)
    rankings: dict[str, list[str]] = field(default_factory=dict)
    scores: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, method: str, hits: Sequence[Scored]) -> None:
        for h in hits:
            self.items.setdefault(h.uuid, h.item)
        self.rank(method, [(h.uuid, h.score) for h in hits])

    def rank(self, method: str, ranked: Sequence[tuple[str, float]]) -> None:
        """A branch's ranking by uuid; its items are read later, if they are needed."""
        ranking = []
        for uuid, score in ranked:
            if uuid not in self.scores or method not in self.scores[uuid]:
                ranking.append(uuid)
                self.scores.setdefault(uuid, {})[method] = round(score, 6)
        self.rankings[method] = ranking


@dataclass
class Search:
    store: SearchReads
    group_id: str
    query: str
    config: SearchConfig
    view: SearchView
    embedder: Embedder | None = None
    cross_encoder: CrossEncoder | None = None
    center: str | None = None
    seeds: list[str] = field(default_factory=list)
    asked_at: datetime | None = None
    ontology: Ontology | None = None
    reports: list[BranchReport] = field(default_factory=list)
    abstained: dict[Scope, float] = field(default_factory=dict)
    checks: dict[Scope, list[AbstainCheck]] = field(default_factory=dict)
    _qvec: list[float] | None = None
    _time: QueryTime | None = None
    _text_query: str = ""
    _factors: dict[str, tuple[float, float]] = field(default_factory=dict)
    _in_window: set[str] = field(default_factory=set)

    async def run(self) -> SearchResults:
        t0 = time.perf_counter()
        self._check()
        self._text_query = self.query
        if self.config.read_time:
            await self._read_time()
        if self.embedder is not None and self._needs_vector():
            # Embedded before the branches run, not beside them: the full-text branch's
            # rescoring is Python, and MiniLM's thread then waits for the GIL at each of its
            # torch ops (a convoy): a 20 ms embedding took 700 ms at 10k facts.
            [self._qvec] = await self.embedder.embed([self.query])
        scopes = [(s, c) for s, c in self._scopes() if c is not None]
        done = await asyncio.gather(*(self._scope(s, c) for s, c in scopes))
        results = SearchResults(
            query=self.query,
            group_id=self.group_id,
            view=self.view,
            branches=self.reports,
            abstained=self.abstained,
            abstain_checks=self.checks,
            time=self._time,
        )
        for (scope, _), hits in zip(scopes, done, strict=True):
            setattr(results, scope.value, hits)
        order = {s: i for i, s in enumerate(Scope)} | {m.value: i for i, m in enumerate(Method)}
        # The entity expansion ("entities") reports after the branches.
        results.branches.sort(key=lambda b: (order[b.scope], order.get(b.method, len(order))))
        results.latency_ms = round((time.perf_counter() - t0) * 1000, 2)
        return results

    async def _hydrate(self, scope: Scope, found: _Scope, uuids: Sequence[str]) -> None:
        """Read the items of `uuids` not read yet (one query); an item deleted since its
        branch ranked it stays absent, and is dropped where it would have been used."""
        missing = [u for u in dict.fromkeys(uuids) if u not in found.items]
        if missing:
            for item in await self.store.items(self.group_id, scope, missing):
                found.items[_uuid(item)] = item
            for u in missing:
                found.items.setdefault(u, None)

    def _scopes(self) -> list[tuple[Scope, ScopeConfig | None]]:
        c = self.config
        return [
            (Scope.facts, c.facts),
            (Scope.entities, c.entities),
            (Scope.episodes, c.episodes),
            (Scope.communities, c.communities),
        ]

    def _needs_vector(self) -> bool:
        return any(
            Method.cosine in c.methods or c.reranker is Reranker.mmr
            for _, c in self._scopes()
            if c is not None
        )

    def _check(self) -> None:
        for scope, c in self._scopes():
            if c is None:
                continue
            if c.reranker is Reranker.cross_encoder and self.cross_encoder is None:
                raise SearchError(
                    f"{scope.value}: the cross_encoder reranker needs a cross-encoder model "
                    "(KG.open(cross_encoder=SentenceTransformerCrossEncoder(...)))"
                )
            if c.reranker is Reranker.mmr and self.embedder is None:
                raise SearchError(f"{scope.value}: the mmr reranker needs an embedder")
            if self.config.abstain_below is not None and Method.cosine not in c.methods:
                raise SearchError(
                    f"{scope.value}: abstain_below compares cosine similarities; add the "
                    "cosine method to this scope"
                )
            joint = self.config.abstain_joint_below is not None
            if joint and not {Method.bm25, Method.cosine} <= set(c.methods):
                raise SearchError(
                    f"{scope.value}: abstain_joint_below weighs BM25 and cosine together; "
                    "this scope needs both methods"
                )
            if joint and self.embedder is None:
                raise SearchError(
                    "abstain_joint_below needs an embedder (it weighs cosine similarity): "
                    "KG.open(embedder=...)"
                )
            if self.config.abstain_below is not None and self.embedder is None:
                # The cosine branch would be dead, its best similarity -1: every scope empty.
                raise SearchError(
                    f"abstain_below needs an embedder (it cuts on cosine similarity): {NO_EMBEDDER}"
                )

    # -- time words -----------------------------------------------------------------------

    @property
    def _asked_at(self) -> datetime:
        return self.asked_at or self.view.valid_at

    async def _read_time(self) -> None:
        """Read the query's time words; apply the first understood window (facts filter on
        it through the view, episodes are boosted in `_scope`). An event-anchored form is
        applied only when a fact search finds its event unambiguously."""
        qt = read_time(self.query, self._asked_at)
        if not qt.expressions:
            return
        if qt.applied is None:
            i, anchored = next(
                ((i, e) for i, e in enumerate(qt.expressions) if e.anchor), (-1, None)
            )
            if anchored is not None:
                resolved = await self._resolve_anchor(anchored)
                exprs = list(qt.expressions)
                exprs[i] = resolved
                rest = self.query.replace(resolved.text, " ") if resolved.understood else qt.rest
                qt = QueryTime(
                    asked_at=qt.asked_at,
                    expressions=exprs,
                    applied=resolved if resolved.understood else None,
                    rest=" ".join(rest.split()),
                )
        self._time = qt
        if qt.applied is not None:
            self._text_query = qt.rest or self.query
            if not self.view.include_history:
                self.view = self.view.model_copy(update={"window": qt.applied.window})

    async def _resolve_anchor(self, expr: TimeExpression) -> TimeExpression:
        """The event's time is the valid time of the fact the full-text branch ranks first
        for the event's words, when the cosine branch (if any) also has it in its top 3;
        otherwise the expression stays not understood, with the reason."""
        assert expr.anchor is not None
        history = self.view.model_copy(update={"include_history": True})
        words = keyword_query(expr.anchor)
        text = await self.store.search_text(self.group_id, Scope.facts, words, history, 5)
        if not text:
            return expr.model_copy(
                update={"note": f"{expr.note}; no fact found for {expr.anchor!r}"}
            )
        top = text[0]
        if self.embedder is not None:
            [vec] = await self.embedder.embed([expr.anchor])
            near = await self.store.search_vector(self.group_id, Scope.facts, vec, history, 3)
            if top.uuid not in {n.uuid for n in near}:
                return expr.model_copy(
                    update={
                        "note": f"{expr.note}; no fact clearly matches {expr.anchor!r} (the "
                        "full-text and cosine branches disagree)"
                    }
                )
        assert isinstance(top.item, Fact)
        event_at = top.item.edge.valid_at
        start, end = anchored_window(expr, event_at)
        return expr.model_copy(
            update={
                "understood": True,
                "start": start,
                "end": end,
                "note": f"{expr.note}: {top.item.edge.fact!r}, valid from "
                f"{event_at.date().isoformat()}",
            }
        )

    # -- trust, recency, time boost -------------------------------------------------------

    async def _tiers(self, facts: dict[str, Fact]) -> dict[str, int]:
        """Each fact's trust: the highest tier among its supporting episodes, so an agent's
        inference restated by the user ranks as the user's word."""
        tiers = {u: int(f.edge.trust) for u, f in facts.items()}
        top = max(TrustTier)
        ask = {ep for f in facts.values() if f.edge.trust < top for ep in f.edge.episodes[1:]}
        if not ask:
            return tiers
        found = {
            e.uuid: int(e.trust) for e in await self.store.episodes(self.group_id, sorted(ask))
        }
        for u, f in facts.items():
            tiers[u] = max([tiers[u], *(found.get(ep, 0) for ep in f.edge.episodes[1:])])
        return tiers

    async def _prior(
        self, fused: list[tuple[str, float]], found: _Scope, limit: int | None
    ) -> list[tuple[str, float]]:
        """Fused scores times the trust factor and the ontology's recency decay.

        Both factors are at most 1, so a candidate never scores above its fused score: with
        a `limit`, candidates are read in fused order, a batch at a time, until `limit` of
        them score at least the next one's fused score (none after it can overtake them).
        The rest are left out, unread. Without one, every candidate is read and scored."""
        out: list[tuple[str, float]] = []
        step = max(2 * limit, 20) if limit else max(len(fused), 1)
        for lo in range(0, len(fused), step):
            chunk = fused[lo : lo + step]
            await self._hydrate(Scope.facts, found, [u for u, _ in chunk])
            out += await self._factored(chunk, found)
            nxt = lo + step
            if limit and nxt < len(fused) and len(out) >= limit and fused[nxt][1] >= 0:
                kth = sorted((sc for _, sc in out), reverse=True)[limit - 1]
                if kth >= fused[nxt][1]:  # a tie goes to the earlier candidate: this one
                    break
        return _resorted(out, fused)

    async def _factored(
        self, fused: list[tuple[str, float]], found: _Scope
    ) -> list[tuple[str, float]]:
        facts = {u: item for u, _ in fused if isinstance(item := found.items.get(u), Fact)}
        if not facts:
            return []
        tiers = await self._tiers(facts)
        labels: dict[str, list[str]] = {}
        onto = self.ontology
        if onto is not None and onto.decays_by_type:
            subjects = sorted({f.edge.source_node_uuid for f in facts.values()})
            labels = {
                n.uuid: n.labels for n in await self.store.entities_by_uuid(self.group_id, subjects)
            }
        out = []
        for u, score in fused:
            if (f := facts.get(u)) is None:
                continue  # deleted since its branch ranked it
            trust = self.config.trust_weights.get(TrustTier(tiers[u]), 1.0)
            recency = 1.0
            decay = (
                onto.decay_for(f.predicate, labels.get(f.edge.source_node_uuid, []))
                if (onto is not None)
                else None
            )
            if decay is not None:
                last = max(f.edge.episode_valid_at, default=f.edge.valid_at)
                recency = decay.factor((self._asked_at - last).total_seconds() / 86400)
            self._factors[u] = (trust, recency)
            out.append((u, score * trust * recency))
        return out

    def _boost(self, fused: list[tuple[str, float]], found: _Scope) -> list[tuple[str, float]]:
        """Episodes said within the query's window rank higher; none is dropped."""
        assert self._time is not None and self._time.applied is not None
        start, end = self._time.applied.window
        out = []
        for u, score in fused:
            item = found.items.get(u)
            at = item.valid_at if isinstance(item, EpisodicNode) else None
            inside = at is not None and (start is None or at >= start) and (end is None or at < end)
            if inside:
                self._in_window.add(u)
            out.append((u, score * (1.0 + self.config.time_boost) if inside else score))
        return _resorted(out, fused)

    def _dates(self, scope: Scope) -> bool:
        """Whether the dated boost applies: episodes, a question asking when, score fusion
        (what it was tuned on; on RRF's compressed scores, 1/(60 + rank), doubling lifts a
        dated turn from anywhere in the window above every undated one: BM25 alone lost 1.7
        points of temporal R@10 on LoCoMo)."""
        return (
            scope is Scope.episodes
            and self.config.dated_boost > 0
            and self.config.fusion is Fusion.score
            and asks_when(self.query)
        )

    def _dated(self, fused: list[tuple[str, float]], found: _Scope) -> list[tuple[str, float]]:
        """A question asking when: the episodes that say when ('yesterday', 'last week')
        rank higher (kg.retrieval.dated); none is dropped."""
        factor = 1.0 + self.config.dated_boost
        out = []
        for u, score in fused:
            item = found.items.get(u)
            dated = isinstance(item, EpisodicNode) and says_when(item.content)
            out.append((u, score * factor if dated else score))
        return _resorted(out, fused)

    def _neighbours(self, scope: Scope) -> bool:
        """Whether session neighbours are lifted: episodes, score fusion (what it was tuned
        on; RRF's scores are ranks), a boost above 0."""
        c = self.config
        return scope is Scope.episodes and c.neighbour_boost > 0 and c.fusion is Fusion.score

    async def _neighboured(self, fused: list[tuple[str, float]]) -> list[tuple[str, float]]:
        """The turns next to the best hits in their session gain a share of the hit's score
        and join the candidates: the answer to a question is often the turn after the one
        that matches it, or the one before (docs/retrieval.md, "Turns next to a hit")."""
        best = fused[: self.config.neighbour_hits]
        near = await self.store.turn_neighbours(self.group_id, [u for u, _ in best], self.view)
        lift: dict[str, float] = {}
        for u, score in best:
            for n in near.get(u, []):
                lift[n] = max(lift.get(n, 0.0), self.config.neighbour_boost * score)
        scores = dict(fused)
        out = [(u, s + lift.get(u, 0.0)) for u, s in fused]
        out += [(n, x) for n, x in lift.items() if n not in scores and x > 0]
        return _resorted(out, fused)

    def _expands(self, scope: Scope) -> bool:
        """Whether the entity expansion runs: episodes, score fusion (its lift is a share of
        the best fused score), a boost above 0."""
        c = self.config
        return scope is Scope.episodes and c.entity_boost > 0 and c.fusion is Fusion.score

    async def _entity_expanded(
        self, fused: list[tuple[str, float]], found: _Scope, limit: int
    ) -> list[tuple[str, float]]:
        """The episodes citing the facts most like the query, among those of the anchor
        entities, gain a share of the best fused score and join the candidates
        (kg.retrieval.entities). The first pass's best `FIRST_HITS` (at least `limit`) are
        read first, in the one read the final cut would make: when none has a fact (raw
        turns), the order stands, nothing more is read and no branch is reported."""
        if not fused:
            return fused
        t0 = time.perf_counter()
        first = fused[: max(limit, FIRST_HITS)]
        await self._hydrate(Scope.episodes, found, [u for u, _ in first])
        hits = [i for u, _ in first if isinstance(i := found.items.get(u), EpisodicNode)]
        if not any(has_facts(h) for h in hits):
            return fused
        anchors = await self._anchors(hits)
        if anchors == set():
            return fused
        ranked = await self._fact_ranking()
        facts = {
            f.edge.uuid: f
            for f in await self.store.items(self.group_id, Scope.facts, [u for u, _ in ranked])
            if isinstance(f, Fact)
        }
        followed = anchored((facts[u] for u, _ in ranked if u in facts), anchors)
        share = cited(followed, shares(ranked))
        await self._hydrate(Scope.episodes, found, list(share))
        best = fused[0][1] * self.config.entity_boost
        lift = {
            u: best * s
            for u, s in share.items()
            if isinstance(ep := found.items.get(u), EpisodicNode) and in_view(ep, self.view)
        }
        ms = round((time.perf_counter() - t0) * 1000, 2)
        self.reports.append(
            BranchReport(scope=Scope.episodes, method="entities", hits=len(lift), latency_ms=ms)
        )
        scores = dict(fused)
        out = [(u, s + lift.get(u, 0.0)) for u, s in fused]
        out += [(u, x) for u, x in lift.items() if u not in scores and x > 0]
        return _resorted(out, fused)

    async def _anchors(self, hits: list[EpisodicNode]) -> set[str] | None:
        """Name keys of the entities whose facts are followed; None: every fact."""
        mode = self.config.entity_anchors
        if mode == EntityAnchors.any:
            return None
        out: set[str] = set()
        if mode in (EntityAnchors.named, EntityAnchors.both):
            words, view = self._full_text_query(), self.view
            found = await self.store.search_text(self.group_id, Scope.entities, words, view, 20)
            out |= named(self.query, (s.item for s in found if isinstance(s.item, EntityNode)))
        if mode in (EntityAnchors.hits, EntityAnchors.both):
            out |= hit_names(hits)
        return out

    async def _fact_ranking(self) -> list[tuple[str, float]]:
        """The facts in view most like the query: by cosine, or BM25 without an embedder."""
        n = self.config.entity_facts
        if self._qvec is not None:
            return await self.store.rank_vector(
                self.group_id, Scope.facts, self._qvec, self.view, n
            )
        query = self._full_text_query()
        return await self.store.rank_text(self.group_id, Scope.facts, query, self.view, n)

    # -- branches -------------------------------------------------------------------------

    async def _timed(
        self, scope: Scope, method: str, run: Callable[[], Awaitable[list[T]]]
    ) -> list[T]:
        t0 = time.perf_counter()
        error = None
        hits: list[T]
        try:
            hits = await run()
        except SearchError as exc:
            hits, error = [], str(exc)
        self.reports.append(
            BranchReport(
                scope=scope,
                method=method,
                hits=len(hits),
                latency_ms=round((time.perf_counter() - t0) * 1000, 2),
                error=error,
            )
        )
        return hits

    def _full_text_query(self) -> str:
        text = self._text_query or self.query
        return keyword_query(text) if self.config.drop_question_words else text

    async def _bm25(self, scope: Scope) -> list[tuple[str, float]]:
        return await self.store.rank_text(
            self.group_id, scope, self._full_text_query(), self.view, self.config.window
        )

    async def _cosine(self, scope: Scope) -> list[tuple[str, float]]:
        if self._qvec is None:
            raise SearchError(NO_EMBEDDER)
        return await self.store.rank_vector(
            self.group_id, scope, self._qvec, self.view, self.config.window
        )

    async def _branch(self, scope: Scope, method: Method) -> list[tuple[str, float]]:
        run = self._cosine if method is Method.cosine else self._bm25
        return await self._timed(scope, method.value, functools.partial(run, scope))

    async def _bfs(self, scope: Scope, found: _Scope) -> list[Scored]:
        seeds = list(self.seeds) or await self._seeds_from(scope, found)
        if not seeds:
            return []
        window = self.config.window
        if scope is Scope.episodes:
            return await self.store.episodes_mentioning_any(self.group_id, seeds, self.view, window)
        if scope is Scope.communities:
            raise SearchError("bfs does not apply to communities")
        hits: dict[str, Scored] = {}
        visited, frontier = set(seeds), list(seeds)
        for hop in range(1, self.config.bfs_depth + 1):
            facts = await self.store.neighbourhood(self.group_id, frontier, self.view, window)
            nxt: list[str] = []
            for f in facts:
                for end in (f.edge.source_node_uuid, f.edge.target_node_uuid):
                    if end not in visited:
                        visited.add(end)
                        nxt.append(end)
                if scope is Scope.facts and f.edge.uuid not in hits:
                    hits[f.edge.uuid] = Scored(uuid=f.edge.uuid, score=1.0 / hop, item=f)
            if scope is Scope.entities:
                for node in await self.store.entities_by_uuid(self.group_id, nxt):
                    hits.setdefault(node.uuid, Scored(uuid=node.uuid, score=1.0 / hop, item=node))
            frontier = nxt
            if not frontier or len(hits) >= window:
                break
        return list(hits.values())[:window]

    def _weights(self, found: _Scope) -> list[float]:
        return [self.config.weights.get(Method(m), 1.0) for m in found.rankings]

    def _fuse(self, found: _Scope, window: int | None = None) -> list[tuple[str, float]]:
        if self.config.fusion is Fusion.score:
            branches = [
                [(u, found.scores[u][m]) for u in ranking] for m, ranking in found.rankings.items()
            ]
            return score_fusion(branches, weights=self._weights(found), window=window)
        return rrf(
            list(found.rankings.values()),
            k=self.config.rrf_k,
            window=window,
            weights=self._weights(found),
        )

    async def _seeds_from(self, scope: Scope, found: _Scope) -> list[str]:
        """Entities at the ends of the other branches' best hits (or the best entities)."""
        best = [u for u, _ in self._fuse(found)[: self.config.bfs_seeds]]
        await self._hydrate(scope, found, best)
        seeds: list[str] = []
        for uuid in best:
            item = found.items.get(uuid)
            if isinstance(item, Fact):
                seeds += [item.edge.source_node_uuid, item.edge.target_node_uuid]
            elif isinstance(item, EntityNode):
                seeds.append(item.uuid)
        return list(dict.fromkeys(seeds))

    # -- one scope: branches, fusion, rerank, cutoff --------------------------------------

    async def _scope(self, scope: Scope, c: ScopeConfig) -> list[Any]:
        found = _Scope()
        first = [m for m in c.methods if m is not Method.bfs]
        hits = await asyncio.gather(*(self._branch(scope, m) for m in first))
        for m, h in zip(first, hits, strict=True):
            found.rank(m.value, h)
        if (best := await self._confidence(scope, found)) is not None:
            self.abstained[scope] = best
            return []
        if Method.bfs in c.methods:
            found.add("bfs", await self._timed(scope, "bfs", lambda: self._bfs(scope, found)))
        fused = self._fuse(found, self.config.window)
        # With the fused order final (up to factors of at most 1), only the candidates that
        # can still make the top k are read; a reranker that looks at items reads them all.
        final = c.reranker is Reranker.rrf
        if not final and c.reranker is not Reranker.mmr:
            await self._hydrate(scope, found, [u for u, _ in fused])
        if scope is Scope.facts:
            fused = await self._prior(fused, found, c.limit if final else None)
        elif scope is Scope.episodes and self._time is not None and self._time.applied:
            await self._hydrate(scope, found, [u for u, _ in fused])
            fused = self._boost(fused, found)
        if self._dates(scope):
            await self._hydrate(scope, found, [u for u, _ in fused])
            fused = self._dated(fused, found)
        if self._neighbours(scope):
            fused = await self._neighboured(fused)
        if self._expands(scope):
            fused = await self._entity_expanded(fused, found, c.limit)
        fused_score = dict(fused)
        ranked = await self._rerank(scope, c, fused, found)
        if self.config.min_score is not None:
            ranked = [(u, s) for u, s in ranked if s >= self.config.min_score]
        top: list[tuple[str, float]] = []
        while ranked and len(top) < c.limit:  # more only if some were deleted meanwhile
            batch, ranked = ranked[: c.limit - len(top)], ranked[c.limit - len(top) :]
            await self._hydrate(scope, found, [u for u, _ in batch])
            top += [(u, s) for u, s in batch if found.items.get(u) is not None]
        return [self._hit(scope, found, u, s, fused_score[u]) for u, s in top]

    async def _confidence(self, scope: Scope, found: _Scope) -> float | None:
        """The signal that fell below its abstention cutoff, or None to go on; each test run
        is kept in `checks` (the first refusal ends them)."""
        cos = Method.cosine.value
        cosine = {u: found.scores[u][cos] for u in found.rankings.get(cos, [])}
        cut = self.config.abstain_below
        if cut is not None and self._test(scope, "cosine", max(cosine.values(), default=-1.0), cut):
            return self.checks[scope][-1].value
        cut = self.config.abstain_joint_below
        if cut is not None and self._test(
            scope, "joint", await self._joint(scope, found, cosine), cut
        ):
            return self.checks[scope][-1].value
        return None

    def _test(self, scope: Scope, signal: str, value: float, cutoff: float) -> bool:
        """Record one abstention test; whether it refuses the scope."""
        check = AbstainCheck(signal=signal, value=value, cutoff=cutoff, abstained=value < cutoff)
        self.checks.setdefault(scope, []).append(check)
        return check.abstained

    async def _joint(self, scope: Scope, found: _Scope, cosine: dict[str, float]) -> float:
        """Agreement of the two branches on one candidate: the best, over the candidates, of
        the mean of its cosine similarity and its BM25 score as a share of the most the query
        could score. A never-said question may match a turn by meaning (the speakers' names
        alone lift it) or by a word, rarely by both (benchmarks/locomo_abstain.py)."""
        ceiling = await self.store.text_ceiling(self.group_id, scope, self._full_text_query())
        if ceiling is None:
            raise SearchError(
                "abstain_joint_below needs kg's own BM25 scores, which this store's full-text "
                "engine does not give (Lucene on Neo4j); use abstain_below"
            )
        bm = Method.bm25.value
        text = (
            {u: found.scores[u][bm] / ceiling for u in found.rankings.get(bm, [])}
            if (ceiling > 0)
            else {}
        )
        # A candidate outside the cosine window is at most as similar as the window's last.
        floor = min(cosine.values(), default=-1.0)
        return max(
            (
                0.5 * cosine.get(u, floor) + 0.5 * text.get(u, 0.0)
                for u in cosine.keys() | text.keys()
            ),
            default=-1.0,
        )

    async def _rerank(
        self, scope: Scope, c: ScopeConfig, fused: list[tuple[str, float]], found: _Scope
    ) -> list[tuple[str, float]]:
        r = c.reranker
        if r is Reranker.rrf or not fused:
            return fused
        if r is Reranker.mmr:
            qvec = self._qvec
            assert qvec is not None
            uuids = [u for u, _ in fused]
            vectors = await self.store.embeddings(self.group_id, scope, uuids)
            return mmr(fused, vectors, qvec, lam=self.config.mmr_lambda, limit=c.limit)
        if r is Reranker.cross_encoder:
            assert self.cross_encoder is not None
            pool = fused[: max(c.limit * 3, 20)]
            pool = [(u, sc) for u, sc in pool if found.items.get(u) is not None]
            texts = [_text(item) for u, _ in pool if (item := found.items[u]) is not None]
            scores = await self.cross_encoder.score(self.query, texts)
            return by_key(
                pool, dict(zip([u for u, _ in pool], scores, strict=True)), default=float("-inf")
            )
        if r is Reranker.node_distance:
            return by_key(fused, await self._closeness(scope, fused, found))
        # episode_mentions: facts by supporting episodes, entities by mentioning episodes
        if scope is Scope.facts:
            counts = {
                u: float(len(i.edge.episodes))
                for u, i in found.items.items()
                if isinstance(i, Fact)
            }
            return by_key(fused, counts)
        if scope is Scope.entities:
            mentions = await self.store.mention_counts(self.group_id, [u for u, _ in fused])
            return by_key(fused, {u: float(n) for u, n in mentions.items()})
        return fused

    async def _closeness(
        self, scope: Scope, fused: list[tuple[str, float]], found: _Scope
    ) -> dict[str, float]:
        """1 / (1 + hops from the centre entity); the centre defaults to the top seed."""
        center = self.center or next(iter(self.seeds or await self._seeds_from(scope, found)), None)
        if center is None:
            return {}
        dist = {center: 0}
        frontier = [center]
        for hop in range(1, 4):
            facts = await self.store.neighbourhood(self.group_id, frontier, self.view, 1000)
            frontier = []
            for f in facts:
                for end in (f.edge.source_node_uuid, f.edge.target_node_uuid):
                    if end not in dist:
                        dist[end] = hop
                        frontier.append(end)
            if not frontier:
                break
        out: dict[str, float] = {}
        for uuid, _ in fused:
            item = found.items.get(uuid)
            if isinstance(item, Fact):
                ends = [dist.get(item.edge.source_node_uuid), dist.get(item.edge.target_node_uuid)]
                d = min((x for x in ends if x is not None), default=None)
            elif isinstance(item, EntityNode):
                d = dist.get(item.uuid)
            else:
                d = None
            if d is not None:
                out[uuid] = 1.0 / (1.0 + d)
        return out

    def _hit(self, scope: Scope, found: _Scope, uuid: str, score: float, fused: float) -> Any:
        ranks = {m: r.index(uuid) + 1 for m, r in found.rankings.items() if uuid in r}
        item = found.items[uuid]
        assert item is not None
        extra = {"branch_scores": found.scores.get(uuid, {})}
        if isinstance(item, Fact):
            closed = not item.edge.holds_at(self.view.valid_at)
            trust, recency = self._factors.get(uuid, (1.0, 1.0))
            return FactHit(
                fact=item,
                closed=closed,
                score=score,
                ranks=ranks,
                fused_score=fused,
                trust_factor=trust,
                recency_factor=recency,
                **extra,
            )
        if isinstance(item, EntityNode):
            return EntityHit(entity=item, score=score, ranks=ranks, fused_score=fused, **extra)
        if isinstance(item, EpisodicNode):
            return EpisodeHit(
                episode=item,
                score=score,
                ranks=ranks,
                fused_score=fused,
                in_window=uuid in self._in_window,
                **extra,
            )
        assert isinstance(item, CommunityNode)
        return CommunityHit(community=item, score=score, ranks=ranks, fused_score=fused, **extra)


def _resorted(
    scored: list[tuple[str, float]], before: list[tuple[str, float]]
) -> list[tuple[str, float]]:
    """Best first; ties keep their order in `before`, after which come the new ones."""
    order = {u: i for i, (u, _) in enumerate(before)}
    return sorted(scored, key=lambda us: (-us[1], order.get(us[0], len(order))))


def _uuid(item: SearchItem) -> str:
    return item.edge.uuid if isinstance(item, Fact) else item.uuid


def _text(item: SearchItem) -> str:
    if isinstance(item, Fact):
        return item.edge.fact
    if isinstance(item, EpisodicNode):
        return item.content
    return f"{item.name}: {item.summary}" if item.summary else item.name


async def search(
    store: SearchReads,
    group_id: str,
    query: str,
    config: SearchConfig,
    view: SearchView,
    *,
    embedder: Embedder | None = None,
    cross_encoder: CrossEncoder | None = None,
    center: str | None = None,
    seeds: Sequence[str] = (),
    asked_at: datetime | None = None,
    ontology: Ontology | None = None,
) -> SearchResults:
    """Run `config` for `query` in `view`. `center` and `seeds` are entity uuids; time words
    are read against `asked_at` (default: the view's valid time); `ontology` gives the
    recency decay of facts (none without one)."""
    return await Search(
        store=store,
        group_id=group_id,
        query=query,
        config=config,
        view=view,
        embedder=embedder,
        cross_encoder=cross_encoder,
        center=center,
        seeds=list(seeds),
        asked_at=asked_at,
        ontology=ontology,
    ).run()
