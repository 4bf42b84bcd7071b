"""Exact cosine over a small group's own items on Neo4j, instead of its shared vector index.

One Neo4j database holds every group, and its vector indexes (one per kind of item) take k and
no filter: the nearest items of a small group sit among a large group's, so the search widens k
until enough pass the group filter, reading about k = wanted x (index size / group size)
candidates. A group's own items, found through its group index and scored with
`vector.similarity.cosine`, cost what the group holds, whatever lies beside it. So a group of
up to `EXACT_COSINE_MAX` items of a kind asks the index for its first k, and when that
answer falls short once more with k over its share of the kind's items (`index_k`: beside a
group ten times its size, a first k of 3 x the limit held about three of its items, and every
search paid the scan), and keeps an answer that is complete (`index_answer_complete`: enough
of the group's items in view, or the whole index read); otherwise it is scored exactly (the true top
k, where the index gives its approximation). A group that is most of the index, or alone in it
beside groups stored without embeddings, so pays one index query, not a scan of its vectors.
A larger group widens the index's k. The bound is the measured crossover (docs/production.md,
benchmarks/neo4j_cosine_crossover.py: with 144,000 facts in the index, exact was 3x faster at
10,000 facts and the index 3x faster at 30,000).
"""

from __future__ import annotations

import math

from kg.schemas.search import Scope, SearchView
from kg.store.cypher.search import EMBEDDING, VARIABLE, first_k, view_filter

EXACT_COSINE_MAX = 15_000
SIZE_TTL_SECONDS = 60.0  # how long a group's counted size is trusted
# An index query for k items costs about what an exact scan of k / INDEX_K_PER_ITEM of a
# group's items does (measured with a 10,000-fact group beside a 100,000-fact one, limit 50:
# k = 1,000 in 185 ms p50, k = 1,650 in 328, the exact scan 305): a k past this share of the
# group's size is not asked for.
INDEX_K_PER_ITEM = 0.12
SHARE_MARGIN = 2.0  # k over the group's share: twice the items in view it needs, on average

# Each kind's items of one group (facts with their ends bound, as a fact's row needs them),
# with the predicate that lets Neo4j seek the group's items in a composite index (it uses one
# only with a predicate on each of its properties).
_GROUP_ITEMS = {
    Scope.facts: ("(s)-[e:RELATES_TO]->(o)", " AND e.name IS NOT NULL", "e, s, o"),
    Scope.entities: ("(n:Entity)", " AND n.name_key IS NOT NULL", "n"),
    Scope.episodes: ("(ep:Episodic)", "", "ep"),
    Scope.communities: ("(c:Community)", " AND c.uuid IS NOT NULL", "c"),
}

_LABELS = {Scope.entities: "Entity", Scope.episodes: "Episodic", Scope.communities: "Community"}


def exact_pays(items: int) -> bool:
    """Whether a group of `items` of a kind is scored exactly when the index's first answer
    falls short: below the measured crossover."""
    return items <= EXACT_COSINE_MAX


def index_k(limit: int, items: int, total: int) -> int:
    """The k of a small group's one index query: `limit` over the group's share of the
    kind's items (`items` of `total`, the unembedded counted too), with a margin for items
    out of view and the spread of its share near the query; at least its first k
    (`first_k`), at most INDEX_K_PER_ITEM of its size, past which the exact scan is cheaper."""
    wanted = math.ceil(SHARE_MARGIN * limit * max(total, items) / max(items, 1))
    return max(first_k(limit), min(wanted, int(items * INDEX_K_PER_ITEM)))


def index_answer_complete(hits: int, rows: int, limit: int, k: int) -> bool:
    """Whether the index's answer to a query for `k` items, `rows` of them returned and `hits`
    of those the group's and in view, is the whole answer: `limit` hits, or fewer rows than k
    (the index holds no more: Neo4j's index, unlike FalkorDB 4.16's, keeps no orphans)."""
    return hits >= limit or rows < k


def total_query(scope: Scope) -> str:
    """How many items of `scope` the database holds, every group's (Neo4j's count store
    answers a count of one label or type without reading an item)."""
    if scope is Scope.facts:
        return "MATCH ()-[e:RELATES_TO]->() RETURN count(e) AS n"
    return f"MATCH (n:{_LABELS[scope]}) RETURN count(n) AS n"


def size_query(scope: Scope) -> str:
    """How many of the group's items of `scope` there are, counted up to $cap."""
    pattern, seek, _ = _GROUP_ITEMS[scope]
    var = VARIABLE[scope]
    return (
        f"MATCH {pattern} WHERE {var}.group_id = $group_id{seek} "
        f"WITH {var} LIMIT $cap RETURN count({var}) AS n"
    )


def exact_query(scope: Scope, view: SearchView, row: str) -> str:
    """The group's items in view scored by cosine against $v, the $k best first, each
    returned as `row` (columns ok, score, row: the vector index path's, every row in view).
    A vector cosine does not define (a zero vector) scores as opposite."""
    pattern, seek, bound = _GROUP_ITEMS[scope]
    var, prop = VARIABLE[scope], EMBEDDING[scope]
    return (
        f"MATCH {pattern} WHERE {view_filter(scope, view)}{seek} AND {var}.{prop} IS NOT NULL "
        f"WITH {bound}, coalesce(vector.similarity.cosine({var}.{prop}, $v), 0.0) AS score "
        f"ORDER BY score DESC LIMIT $k RETURN true AS ok, score, {row} AS row"
    )
