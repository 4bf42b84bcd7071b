"""The read side of search, in the Cypher both backends share: full-text, vector, neighbourhood.

Every query applies the group and the bi-temporal view *before* it ranks or cuts to k:
- full-text: the procedure yields every match (on Neo4j, whose one index holds every group,
  the group's only: the query requires its key, `Dialect.in_group`); the view filter runs on
  the engine's best matches (on every match when too few of those pass), then ORDER BY ...
  LIMIT;
- vector: the indexes rank first (FalkorDB's and Neo4j's procedures take k and no filter), so
  kg over-fetches, filters, and widens k until it has enough hits that pass the view or a
  wider k brings nothing new. The result is the top k among the items in view, as if the
  filter had run first (up to the index's own approximation).
Rows are projected without their embeddings, which would otherwise dominate transfer time.
"""

from __future__ import annotations

import abc
import asyncio
from typing import Any

from kg.schemas.graph import VECTOR_FIELDS, CommunityNode, EntityNode, EpisodicNode, Fact, FactEdge
from kg.schemas.search import Scope, Scored, SearchView
from kg.store.cypher.analyzer import query_terms
from kg.store.cypher.base import CypherBase
from kg.store.cypher.bm25 import (
    TIE_BREAK,
    bm25,
    past_bound,
    query_tokens,
    split_rare,
    upper_bound,
)
from kg.store.cypher.dialect import unindexed

_VECTORS = set(VECTOR_FIELDS)
_ENDPOINTS = {"source_node_uuid", "target_node_uuid"}
VECTOR_K_MAX = 20_000
BM25_POOL = 1000  # candidates the engine hands to the BM25 rescoring, at least
OVER_FETCH = 2  # the engine's best matches read per pool row before the view filter
# Pools of more documents than this are scored on a worker thread: analysing a thousand of
# them holds the interpreter for tens of milliseconds (hundreds on a loaded machine), and on
# the server's one event loop every other tenant's request would wait that long. On a
# thread the loop takes its turn at each GIL switch interval (5 ms) instead.
THREAD_POOL_FROM = 200


def _projection(var: str, model: type[Any], skip: set[str]) -> str:
    """A map literal of the model's stored fields (a plain openCypher map, not a projection)."""
    fields = [f for f in model.model_fields if f not in skip]
    return "{" + ", ".join(f"{f}: {var}.{f}" for f in fields) + "}"


# What each scope matches, the variable it binds, and its row projection.
_FACT_PROJ = _projection("e", FactEdge, _VECTORS | _ENDPOINTS)
_VAR = {Scope.facts: "e", Scope.entities: "n", Scope.episodes: "ep", Scope.communities: "c"}
_PROJ = {
    Scope.entities: _projection("n", EntityNode, _VECTORS),
    Scope.episodes: _projection("ep", EpisodicNode, _VECTORS),
    Scope.communities: _projection("c", CommunityNode, _VECTORS),
}
COMMUNITY_COLUMNS = _PROJ[Scope.communities]
VARIABLE = _VAR  # each scope's bound variable, for backends that build their own sources
_LABEL = {Scope.entities: "Entity", Scope.episodes: "Episodic", Scope.communities: "Community"}
# The text BM25 scores, per scope (what the full-text index covers, grams aside).
_TEXT = {
    Scope.facts: "e.fact",
    Scope.entities: "n.name + ' ' + coalesce(n.summary, '')",
    Scope.episodes: "coalesce(ep.search_key, ep.content)",  # its key (kg.search_keys)
    Scope.communities: "c.name + ' ' + coalesce(c.summary, '')",
}
_EMBEDDING = {
    Scope.facts: "fact_embedding",
    Scope.entities: "name_embedding",
    Scope.episodes: "key_embedding",
    Scope.communities: "name_embedding",
}
EMBEDDING = _EMBEDDING
FACT_COLUMNS = (
    f" RETURN {_FACT_PROJ} AS e, s.uuid AS source, o.uuid AS target,"
    " s.name AS subject, o.name AS object"
)


def view_filter(scope: Scope, view: SearchView) -> str:
    """The WHERE clause (group + bi-temporal view) for the scope's bound variable."""
    if scope is Scope.facts:
        clauses = [
            "e.group_id = $group_id",
            f"{unindexed('e.created_at')} <= $known_at",
            "(e.expired_at IS NULL OR e.expired_at > $known_at)",
        ]
        if view.window is not None and not view.include_history:
            start, end = view.window  # overlap with [start, end); a null bound is open
            if end is not None:
                clauses.append("(e.valid_at IS NULL OR e.valid_at < $window_end)")
            if start is not None:
                clauses.append("(e.invalid_at IS NULL OR e.invalid_at > $window_start)")
        elif not view.include_history:
            clauses += [
                # A null valid_at only occurs in graphs other tools wrote: unknown, not never.
                "(e.valid_at IS NULL OR e.valid_at <= $valid_at)",
                "(e.invalid_at IS NULL OR e.invalid_at > $valid_at)",
            ]
        if not view.include_contested:
            clauses.append("coalesce(e.status, 'active') = 'active'")
    elif scope is Scope.episodes:
        # Structured episodes' content is their facts as JSON; the facts are what to search.
        clauses = [
            "ep.group_id = $group_id",
            # Queued and processing episodes too: an agent finds what it just wrote.
            "coalesce(ep.status, 'ingested') IN ['ingested', 'queued', 'processing']",
            "ep.source <> 'facts'",
            "coalesce(ep.queued_at, ep.created_at) <= $known_at",
        ]
        if not view.include_history:
            clauses.append(f"{unindexed('ep.valid_at')} <= $valid_at")
    else:
        v = _VAR[scope]
        clauses = [f"{v}.group_id = $group_id", f"{unindexed(v + '.created_at')} <= $known_at"]
    return " AND ".join(clauses)


class CypherSearch(CypherBase):
    @abc.abstractmethod
    async def _search_ready(self, group_id: str, scope: Scope | None = None) -> None:
        """Wait until the group's search indexes (those of `scope`, or all) are populated."""

    def _view_params(self, group_id: str, view: SearchView) -> dict[str, Any]:
        params = {
            "group_id": group_id,
            "valid_at": self.dialect.encode_time(view.valid_at),
            "known_at": self.dialect.encode_time(view.known_at),
        }
        for name, bound in zip(("window_start", "window_end"), view.window or (), strict=False):
            if bound is not None:
                params[name] = self.dialect.encode_time(bound)
        return params

    def _item(
        self, scope: Scope, row: dict[str, Any]
    ) -> Fact | EntityNode | EpisodicNode | CommunityNode:
        if scope is Scope.facts:
            return self._fact(row)
        props = self._decode(row["n"])
        if scope is Scope.entities:
            return EntityNode.model_validate(props)
        if scope is Scope.episodes:
            return EpisodicNode.model_validate(props)
        return CommunityNode.model_validate(props)

    def _returns(self, scope: Scope, extra: str = "") -> str:
        if scope is Scope.facts:
            return f"WITH e, score, startNode(e) AS s, endNode(e) AS o{extra}"
        return f"WITH {_VAR[scope]}, score{extra}"

    def _columns(self, scope: Scope) -> str:
        return FACT_COLUMNS if scope is Scope.facts else f" RETURN {_PROJ[scope]} AS n"

    # -- full text: search_text for callers that want items, rank_text for search --------

    async def search_text(
        self, group_id: str, scope: Scope, query: str, view: SearchView, limit: int
    ) -> list[Scored]:
        if self.dialect.engine_scorer == "bm25":  # the engine ranks: one query, rows and all
            rows = await self._engine_text(group_id, scope, query, view, limit, rows=True)
            items = [self._item(scope, r) for r in rows]
            return [
                Scored(uuid=_uuid(i), score=float(r["score"]), item=i)
                for i, r in zip(items, rows, strict=True)
            ]
        ranked = await self.rank_text(group_id, scope, query, view, limit)
        return await self._hydrated(group_id, scope, ranked)

    async def rank_text(
        self, group_id: str, scope: Scope, query: str, view: SearchView, limit: int
    ) -> list[tuple[str, float]]:
        """Full-text (uuid, score), best first, without the items' rows."""
        if self.dialect.engine_scorer == "bm25":
            rows = await self._engine_text(group_id, scope, query, view, limit, rows=False)
            return [(r["uuid"], float(r["score"])) for r in rows]
        pairs = query_tokens(query_terms(query))
        if not pairs:
            return []
        await self._search_ready(group_id, scope)
        n, df = await self._term_stats(group_id, scope, [t for t, _ in pairs])
        # MaxScore (Turtle and Flood, 1995): a document matching none of the rare terms
        # scores below the sum of the common terms' upper bounds. When the rare terms' own
        # pool already holds `limit` documents above that sum, a document matching only
        # common terms cannot reach the top, and the engine need not yield those (it yields
        # every match, unranked: a third of a million rows for "lives" at a million facts).
        # The common terms stay in that query as optional ones: they cost the engine only
        # the rare terms' matches, and its pool of the best rare matches then favours those
        # holding common terms too, as BM25 will (without them the pool's cut lost 3.9 points
        # of top-50 recall against exact BM25 at 100k facts; with them none).
        # When the pool does not settle it, the next rarest term joins the asked ones: its
        # bound leaves the sum, and the documents holding it and a rare term join the pool
        # ("Seoul and Kakao" settles what "Kakao" alone could not, long before "lives").
        # Past bm25.PRUNE_UPTO matches the next term is not asked for: the pool in hand answers.
        rare, common = split_rare(pairs, df)
        while common:
            ranked, kth = await self._rescored(group_id, scope, pairs, rare, (n, df), view, limit)
            # The engine's score adds at most TIE_BREAK to a BM25 score (see _rescored).
            if kth - TIE_BREAK > sum(upper_bound(df[t], n) for t, _ in common):
                return ranked
            # A pool short of `limit` (a rare word that matches nothing) never answers.
            if past_bound(rare, common[0], df) and len(ranked) >= limit:
                return ranked
            rare, common = [*rare, common[0]], common[1:]
        ranked, _ = await self._rescored(group_id, scope, pairs, pairs, (n, df), view, limit)
        return ranked

    async def text_ceiling(self, group_id: str, scope: Scope, query: str) -> float | None:
        if self.dialect.engine_scorer == "bm25":
            return None  # Lucene's scores: its statistics span every group and field
        pairs = query_tokens(query_terms(query))
        if not pairs:
            return 0.0
        await self._search_ready(group_id, scope)
        n, df = await self._term_stats(group_id, scope, [t for t, _ in pairs])  # cached
        return sum(upper_bound(d, max(n, 1)) for d in {tok: df[t] for t, tok in pairs}.values())

    async def _engine_text(
        self,
        group_id: str,
        scope: Scope,
        query: str,
        view: SearchView,
        limit: int,
        *,
        rows: bool,
    ) -> list[dict[str, Any]]:
        """The engine's own ranking (Lucene's BM25) after the view filter: full rows, or
        uuid and score."""
        pairs = query_tokens(query_terms(query))
        if not pairs:
            return []
        await self._search_ready(group_id, scope)
        v = _VAR[scope]
        if rows:
            returns, columns = self._returns(scope), f"{self._columns(scope)}, score"
        else:
            returns, columns = f"WITH {v}, score", f" RETURN {v}.uuid AS uuid, score"
        cypher = (
            f"{self.dialect.fulltext_call(scope)} {returns} "
            f"WHERE {view_filter(scope, view)}{columns} ORDER BY score DESC LIMIT $max_rows"
        )
        params = {
            **self._view_params(group_id, view),
            "max_rows": limit,
            "q": self.dialect.in_group(group_id, self.dialect.text_query([t for t, _ in pairs])),
        }
        return await self._read(group_id, cypher, params)

    async def _rescored(
        self,
        group_id: str,
        scope: Scope,
        pairs: list[tuple[str, str]],
        asked: list[tuple[str, str]],
        stats: tuple[int, dict[str, int]],
        view: SearchView,
        limit: int,
    ) -> tuple[list[tuple[str, float]], float]:
        """BM25 over a light pool (uuid, text, engine score) of the documents matching the
        `asked` terms, scored on every term of `pairs`: the best `limit`, and the score of the
        `limit`-th (0 when there are fewer)."""
        n, df = stats
        v = _VAR[scope]
        columns = f"RETURN {v}.uuid AS uuid, {_TEXT[scope]} AS text, score"
        # The view filter costs more per row than the engine's match and score (at 20,000
        # matches, 34 of 54 ms), so it first runs on the best matches by the engine's score
        # alone: when enough of them pass, the pool is the one the whole match set gives (up
        # to ties at the cut). collect() is a barrier: FalkorDB 4.16 moves a WHERE that
        # follows a LIMIT below it, which filters every match again.
        best_first = (
            f"{self.dialect.fulltext_call(scope)} WITH {v}, score ORDER BY score DESC "
            f"LIMIT $over WITH collect([{v}, score]) AS best UNWIND best AS b "
            f"WITH b[0] AS {v}, b[1] AS score, size(best) AS seen "
            f"WHERE {view_filter(scope, view)} {columns}, seen ORDER BY score DESC LIMIT $max_rows"
        )
        optional = [t for t, tok in pairs if (t, tok) not in asked]
        max_rows = max(limit * 10, BM25_POOL)
        params = {
            **self._view_params(group_id, view),
            "max_rows": max_rows,
            "over": OVER_FETCH * max_rows,
            "q": self.dialect.in_group(
                group_id, self.dialect.text_query([t for t, _ in asked], optional)
            ),
        }
        pool = await self._read(group_id, best_first, params)
        if len(pool) < max_rows and (not pool or pool[0]["seen"] >= params["over"]):
            # The view set aside too many of the best (a long history): every match, filtered.
            every = (
                f"{self.dialect.fulltext_call(scope)} WITH {v}, score "
                f"WHERE {view_filter(scope, view)} {columns} ORDER BY score DESC LIMIT $max_rows"
            )
            pool = await self._read(group_id, every, params)
        if not pool:
            return [], 0.0
        args = (
            [tok for _, tok in pairs],
            [r["text"] or "" for r in pool],
            {tok: df[t] for t, tok in pairs},
            n,
        )
        big = len(pool) > THREAD_POOL_FROM
        scores = await asyncio.to_thread(bm25, *args) if big else bm25(*args)
        top = max(float(r["score"]) for r in pool) or 1.0
        # The engine's own score, scaled far below any BM25 term, only breaks ties and keeps
        # a document whose match the two stemmers disagree on.
        ranked = sorted(
            (
                (r["uuid"], b + TIE_BREAK * float(r["score"]) / top)
                for r, b in zip(pool, scores, strict=True)
            ),
            key=lambda us: -us[1],
        )[:limit]
        kth = ranked[limit - 1][1] if len(ranked) >= limit else 0.0
        return [(u, round(sc, 6)) for u, sc in ranked], kth

    async def _hydrated(
        self, group_id: str, scope: Scope, ranked: list[tuple[str, float]]
    ) -> list[Scored]:
        by_uuid = {_uuid(i): i for i in await self.items(group_id, scope, [u for u, _ in ranked])}
        return [Scored(uuid=u, score=sc, item=by_uuid[u]) for u, sc in ranked if u in by_uuid]

    async def items(
        self, group_id: str, scope: Scope, uuids: list[str]
    ) -> list[Fact | EntityNode | EpisodicNode | CommunityNode]:
        """The scope's items by uuid, in no particular order; unknown uuids are absent."""
        if not uuids:
            return []
        if scope is Scope.facts:
            cypher = (
                # Anonymous endpoints: FalkorDB only uses the edge index in this shape.
                "UNWIND $uuids AS u MATCH ()-[e:RELATES_TO {uuid: u}]->() "
                "WITH e, startNode(e) AS s, endNode(e) AS o "
                f"WHERE e.group_id = $group_id{FACT_COLUMNS}"
            )
        else:
            v = _VAR[scope]
            cypher = (
                f"UNWIND $uuids AS u MATCH ({v}:{_LABEL[scope]} {{uuid: u}}) "
                f"WHERE {v}.group_id = $group_id{self._columns(scope)}"
            )
        rows = await self._read(group_id, cypher, {"uuids": uuids, "group_id": group_id})
        return [self._item(scope, r) for r in rows]

    async def _term_stats(
        self, group_id: str, scope: Scope, terms: list[str]
    ) -> tuple[int, dict[str, int]]:
        """Collection size and document frequencies, cached until the collection grows or
        shrinks by a tenth (BM25 barely moves with small changes in either)."""
        pattern = "()-[x:RELATES_TO]->()" if scope is Scope.facts else f"(x:{_LABEL[scope]})"
        # Only the rescoring backend (FalkorDB) gets here, where a group is a graph of its own:
        # an unfiltered count is exact and answered from the label or type matrix, without
        # touching a single entity (a filtered one scans every edge: 30 ms at 100k facts).
        rows = await self._read(group_id, f"MATCH {pattern} RETURN count(x) AS c", {})
        n = int(rows[0]["c"]) if rows else 0
        cache: dict[tuple[str, Scope], tuple[int, dict[str, int]]]
        cache = self.__dict__.setdefault("_df_cache", {})
        key = (group_id, scope)
        at, known = cache.get(key, (n, {}))
        if not 0.9 * at <= n <= 1.1 * at:
            at, known = n, {}
        for t in terms:
            if t not in known:
                count = await self._read(
                    group_id,
                    f"{self.dialect.fulltext_call(scope)} RETURN count(*) AS c",
                    {"q": self.dialect.in_group(group_id, self.dialect.text_query([t]))},
                )
                known[t] = int(count[0]["c"]) if count else 0
        cache[key] = (at, known)
        return n, {t: known[t] for t in terms}

    # -- vectors ------------------------------------------------------------------------

    async def search_vector(
        self, group_id: str, scope: Scope, vector: list[float], view: SearchView, limit: int
    ) -> list[Scored]:
        rows = await self._vector_rows(group_id, scope, vector, view, limit, full=True)
        out = []
        for score, row in rows:
            item = self._item(scope, row)
            out.append(Scored(uuid=_uuid(item), score=score, item=item))
        return out

    async def rank_vector(
        self, group_id: str, scope: Scope, vector: list[float], view: SearchView, limit: int
    ) -> list[tuple[str, float]]:
        """Nearest (uuid, cosine similarity), best first, without the items' rows."""
        rows = await self._vector_rows(group_id, scope, vector, view, limit, full=False)
        return [(uuid, score) for score, uuid in rows]

    async def _vector_rows(
        self,
        group_id: str,
        scope: Scope,
        vector: list[float],
        view: SearchView,
        limit: int,
        *,
        full: bool,
    ) -> list[tuple[float, Any]]:
        """(similarity, row) of the `limit` nearest items in view, best first; the row is the
        item's whole row when `full`, else its uuid."""
        await self._search_ready(group_id, scope)
        cypher = self._vector_query(scope, view, self.dialect.vector_call(scope), full=full)
        params = {**self._view_params(group_id, view), "v": vector}
        k, seen = first_k(limit), -1
        while True:
            rows = await self._read(group_id, cypher, {**params, "k": k})
            hits = [r for r in rows if r["ok"]]
            # Fewer rows than k does not mean the index is exhausted: FalkorDB 4.16 leaves an
            # orphan vector behind each update of an indexed edge, and orphans take top-k
            # slots without yielding rows (upstream FalkorDB PR #2197). Only a widening that
            # brings no new row proves there is nothing more to find.
            if len(hits) >= limit or len(rows) == seen or k >= VECTOR_K_MAX:
                break
            seen, k = len(rows), min(k * 4, VECTOR_K_MAX)
        out = [(self.dialect.similarity(float(r["score"])), r["row"]) for r in hits]
        out.sort(key=lambda sr: -sr[0])
        return out[:limit]

    def _vector_query(self, scope: Scope, view: SearchView, source: str, *, full: bool) -> str:
        """`source` (binding the scope's variable and `score`, k nearest first) with, per row,
        whether it is in view and, if so, its row (the whole row when `full`, else its uuid)."""
        ok = f", ({view_filter(scope, view)}) AS ok"
        returns = self._returns(scope, ok) if full else f"WITH {_VAR[scope]}, score{ok}"
        row = self._vector_row(scope, full=full)
        return f"{source} {returns} RETURN ok, score, CASE WHEN ok THEN {row} ELSE null END AS row"

    def _vector_row(self, scope: Scope, *, full: bool) -> str:
        """A vector hit's row: the item's whole row (facts: with `s` and `o` bound), or its uuid."""
        if full:
            return f"{{{_row_map(scope, self._columns(scope).removeprefix(' RETURN '))}}}"
        return f"{_VAR[scope]}.uuid"

    async def neighbourhood(
        self, group_id: str, entity_uuids: list[str], view: SearchView, limit: int
    ) -> list[Fact]:
        """Facts in view that touch any of the entities (one hop, either direction)."""
        if not entity_uuids:
            return []
        where = view_filter(Scope.facts, view)
        params = {
            **self._view_params(group_id, view),
            "seeds": sorted(set(entity_uuids)),
            "max_rows": limit,
        }
        out: dict[str, Fact] = {}
        for pattern in (
            "(s:Entity {uuid: u})-[e:RELATES_TO]->(o:Entity)",
            "(s:Entity)-[e:RELATES_TO]->(o:Entity {uuid: u})",
        ):
            cypher = (
                f"UNWIND $seeds AS u MATCH {pattern} WHERE {where}{FACT_COLUMNS} LIMIT $max_rows"
            )
            for r in await self._read(group_id, cypher, params):
                fact = self._fact(r)
                out.setdefault(fact.edge.uuid, fact)
        return list(out.values())[:limit]

    async def facts_between(
        self, group_id: str, pairs: list[tuple[str, str]], view: SearchView, limit: int
    ) -> list[Fact]:
        """Facts in view joining the two entities of any pair, in either direction."""
        ends = sorted({(a, b) for pair in pairs for a, b in (pair, pair[::-1])})
        if not ends:
            return []
        cypher = (
            "UNWIND $pairs AS p MATCH (s:Entity {uuid: p.s})-[e:RELATES_TO]->"
            f"(o:Entity {{uuid: p.o}}) WHERE {view_filter(Scope.facts, view)}{FACT_COLUMNS} "
            "LIMIT $max_rows"
        )
        params = {
            **self._view_params(group_id, view),
            "max_rows": limit,
            "pairs": [{"s": a, "o": b} for a, b in ends],
        }
        rows = await self._read(group_id, cypher, params)
        facts = {f.edge.uuid: f for f in map(self._fact, rows)}
        return sorted(facts.values(), key=lambda f: f.edge.uuid)

    async def episodes_mentioning_any(
        self, group_id: str, entity_uuids: list[str], view: SearchView, limit: int
    ) -> list[Scored]:
        """Episodes in view that mention the entities, scored by how many of them they name."""
        if not entity_uuids:
            return []
        cypher = (
            "UNWIND $seeds AS u MATCH (ep:Episodic)-[:MENTIONS]->(:Entity {uuid: u}) "
            f"WHERE {view_filter(Scope.episodes, view)} "
            f"WITH ep, count(*) AS score RETURN {_PROJ[Scope.episodes]} AS n, score "
            "ORDER BY score DESC, n.created_at DESC LIMIT $max_rows"
        )
        params = {
            **self._view_params(group_id, view),
            "seeds": sorted(set(entity_uuids)),
            "max_rows": limit,
        }
        out = []
        for r in await self._read(group_id, cypher, params):
            item = self._item(Scope.episodes, r)
            out.append(Scored(uuid=_uuid(item), score=float(r["score"]), item=item))
        return out

    async def turn_neighbours(
        self, group_id: str, uuids: list[str], view: SearchView
    ) -> dict[str, list[str]]:
        """The turns in view just before and after each episode in its session (one query)."""
        if not uuids:
            return {}
        here = "coalesce(h.queued_at, h.created_at)"
        there = "coalesce(ep.queued_at, ep.created_at)"
        cypher = (
            "UNWIND $uuids AS u MATCH (h:Episodic {uuid: u}) "
            "WHERE h.group_id = $group_id AND h.session_id IS NOT NULL "
            "MATCH (ep:Episodic {session_id: h.session_id}) "
            f"WHERE {view_filter(Scope.episodes, view)} AND ep.uuid <> h.uuid "
            f"WITH h, ep, {unindexed('ep.valid_at')} AS at, {there} AS arrived, "
            f"({unindexed('ep.valid_at')} < {unindexed('h.valid_at')} OR "
            f"({unindexed('ep.valid_at')} = {unindexed('h.valid_at')} AND {there} < {here})) "
            "AS before ORDER BY at, arrived "
            "WITH h, collect(CASE WHEN before THEN ep.uuid END) AS earlier, "
            "collect(CASE WHEN before THEN null ELSE ep.uuid END) AS later "
            "RETURN h.uuid AS uuid, earlier[size(earlier) - 1] AS prev, later[0] AS next"
        )
        params = {**self._view_params(group_id, view), "uuids": sorted(set(uuids))}
        out = {}
        for r in await self._read(group_id, cypher, params):
            near = [n for n in (r["prev"], r["next"]) if n is not None]
            if near:
                out[r["uuid"]] = near
        return out

    async def entities_by_uuid(self, group_id: str, uuids: list[str]) -> list[EntityNode]:
        if not uuids:
            return []
        rows = await self._read(
            group_id,
            f"UNWIND $uuids AS u MATCH (n:Entity {{uuid: u}}) WHERE n.group_id = $group_id "
            f"RETURN {_PROJ[Scope.entities]} AS n",
            {"uuids": sorted(set(uuids)), "group_id": group_id},
        )
        return [EntityNode.model_validate(self._decode(r["n"])) for r in rows]

    async def mention_counts(self, group_id: str, entity_uuids: list[str]) -> dict[str, int]:
        if not entity_uuids:
            return {}
        rows = await self._read(
            group_id,
            "UNWIND $uuids AS u MATCH (ep:Episodic)-[:MENTIONS]->(n:Entity {uuid: u}) "
            "WHERE n.group_id = $group_id AND ep.status = 'ingested' "
            "RETURN u AS uuid, count(ep) AS c",
            {"uuids": sorted(set(entity_uuids)), "group_id": group_id},
        )
        return {r["uuid"]: int(r["c"]) for r in rows}

    async def embeddings(
        self, group_id: str, scope: Scope, uuids: list[str]
    ) -> dict[str, list[float]]:
        """Stored embeddings by uuid; items without one are absent."""
        if not uuids:
            return {}
        prop = _EMBEDDING[scope]
        pattern = (
            "()-[x:RELATES_TO {uuid: u}]->()"
            if scope is Scope.facts
            else f"(x:{_LABEL[scope]} {{uuid: u}})"
        )
        rows = await self._read(
            group_id,
            f"UNWIND $uuids AS u MATCH {pattern} WHERE x.group_id = $group_id "
            f"AND x.{prop} IS NOT NULL RETURN u AS uuid, x.{prop} AS v",
            {"uuids": sorted(set(uuids)), "group_id": group_id},
        )
        return {r["uuid"]: [float(x) for x in r["v"]] for r in rows}


def _row_map(scope: Scope, cols: str) -> str:
    """`RETURN a AS x, b AS y` columns as map entries `x: a, y: b` (one nullable column)."""
    entries = []
    for part in _split_top(cols):
        expr, _, alias = part.rpartition(" AS ")
        entries.append(f"{alias.strip()}: {expr.strip()}")
    return ", ".join(entries)


def _split_top(text: str) -> list[str]:
    """Split on commas outside braces."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def _uuid(item: Fact | EntityNode | EpisodicNode | CommunityNode) -> str:
    return item.edge.uuid if isinstance(item, Fact) else item.uuid


def first_k(limit: int) -> int:
    """The k of a vector index's first query for `limit` items in view: over-fetched, as
    other groups' items and items out of view take some of its slots."""
    return max(limit * 3, 30)
