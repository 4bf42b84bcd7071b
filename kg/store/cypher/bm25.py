"""Okapi BM25 over the full-text index's candidates.

FalkorDB's full-text procedures rank with RediSearch's default TF-IDF scorer and expose no
other; on conversational text that scorer lets a short turn matching one common word ("did")
outrank the turn matching the rare words of the question (LoCoMo R@5 fell to 9% against 49%
for plain BM25). So kg asks the index for a generous candidate pool, then scores the pool
with BM25 (k1 = 1.2, b = 0.75) from collection statistics: document frequencies from the
index (one count per term, cached per group until the collection grows by a tenth) and the
pool's mean length as the average document length.

Tokens are lower-cased words stemmed by Snowball's English stemmer (`snowballstemmer`), the
one RediSearch matches with, so a BM25 token and the engine's term agree ('family' and
'families' meet in both), plus the CJK bigrams of `kg.store.cypher.analyzer`. On Neo4j, Lucene
scores with its own analyser and none of this runs (`Dialect.engine_scorer`).
"""

from __future__ import annotations

import functools
import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Sequence

import snowballstemmer

from kg.store.cypher.analyzer import grams

K1 = 1.2
B = 0.75
# The engine's own score, scaled to at most this, breaks ties between equal BM25 scores.
TIE_BREAK = 1e-6
# Matches the engine yields cheaply (about a millisecond a thousand): a query whose terms
# match fewer documents in all runs unpruned; above it, the rarest terms run first (MaxScore).
PRUNE_FROM = 10_000
# Matches past which the next term is not asked for to settle the top k: the pool in hand is
# the answer (FalkorDB yields every match, and a query whose terms all match a fifth of a
# million facts takes seconds). At 30,000 the full-text branch's top 50 kept all of exact
# BM25's at 1M facts and 98.1% at 100k (up to ties; 97.7% before any pruning): see
# docs/retrieval.md.
PRUNE_UPTO = 30_000
# RediSearch drops these from queries and documents (its default English stop list).
STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    }
)
_WORD = re.compile(r"[^\W_]+")
# Words shorter than this are kept as they are: RediSearch's MIN_STEMMING_LEN default (4),
# so 'gps' is not 'gp'.
MIN_STEM = 4
_STEMMERS = threading.local()  # a Snowball stemmer object is not safe to share between threads


@functools.lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """Snowball's English (Porter 2) stem, the one RediSearch indexes and queries with, so a
    word's BM25 token is the engine's term: 'family' and 'families' -> 'famili', 'focus' and
    'focused' -> 'focus', 'live' / 'lives' / 'lived' / 'living' -> 'live'. Non-ASCII words (the
    engine's stemmer is English) and words under MIN_STEM letters are kept."""
    if not word.isascii() or len(word) < MIN_STEM:
        return word
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = snowballstemmer.stemmer("english")
    return str(stemmer.stemWord(word))


def tokens(text: str) -> list[str]:
    norm = unicodedata.normalize("NFKC", text).casefold()
    words = [stem(w) for w in _WORD.findall(norm) if w not in STOPWORDS]
    return words + grams(norm).split()


def idf(df: int, n: int) -> float:
    """Lucene's BM25 idf: never negative, so a term in most documents still counts a little."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def upper_bound(df: int, n: int) -> float:
    """The most one query term can add to a document's score: tf (K1 + 1) / (tf + norm) is
    below K1 + 1 for any tf and document length."""
    return (K1 + 1.0) * idf(df, n)


def split_rare(
    pairs: Sequence[tuple[str, str]], df: dict[str, int]
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The query's terms as (rare, common): the rarest terms whose document frequencies add
    up to at most PRUNE_FROM (at least one), and the others; every term is rare when all of
    them together match at most PRUNE_FROM documents."""
    if sum(df.get(t, 0) for t, _ in pairs) <= PRUNE_FROM:
        return list(pairs), []
    ordered = sorted(pairs, key=lambda p: df.get(p[0], 0))
    rare: list[tuple[str, str]] = []
    total = 0
    for p in ordered:
        if rare and total + df.get(p[0], 0) > PRUNE_FROM:
            break
        rare.append(p)
        total += df.get(p[0], 0)
    return rare, ordered[len(rare) :]


def past_bound(asked: Sequence[tuple[str, str]], nxt: tuple[str, str], df: dict[str, int]) -> bool:
    """Whether asking for `nxt` too would have the engine yield over PRUNE_UPTO matches."""
    return sum(df.get(t, 0) for t, _ in asked) + df.get(nxt[0], 0) > PRUNE_UPTO


def bm25(terms: Sequence[str], docs: Sequence[str], df: dict[str, int], n: int) -> list[float]:
    """Scores of `docs` for the query `terms` (already analysed: see `query_tokens`)."""
    bags = [Counter(tokens(d)) for d in docs]
    lengths = [sum(b.values()) for b in bags]
    avgdl = (sum(lengths) / len(lengths)) if lengths else 1.0
    weights = {t: idf(df.get(t, 0), max(n, 1)) for t in set(terms)}
    out = []
    for bag, dl in zip(bags, lengths, strict=True):
        s = 0.0
        norm = K1 * (1.0 - B + B * dl / (avgdl or 1.0))
        for t, w in weights.items():
            tf = bag.get(t, 0)
            if tf:
                s += w * tf * (K1 + 1.0) / (tf + norm)
        out.append(s)
    return out


def query_tokens(raw_terms: Sequence[str]) -> list[tuple[str, str]]:
    """(engine term, BM25 token) pairs, stop words dropped: the engine term is what the index
    is asked for, the token what documents are counted by."""
    out = []
    for t in raw_terms:
        if t in STOPWORDS:
            continue
        out.append((t, stem(t) if _WORD.fullmatch(t) and t.isascii() else t))
    return list(dict.fromkeys(out))
