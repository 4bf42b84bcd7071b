"""Text analysis for the full-text indexes, shared by both backends.

FalkorDB's full-text engine (RediSearch) and Lucene's standard analyzer split on spaces and
punctuation. Korean, Japanese and Chinese attach particles and endings to words without a
space ("부산으로", "부산에"), so a query that differs from the text only by a particle finds
nothing. kg therefore writes a second indexed field, `text_grams`, holding the character
bigrams of every CJK run, and adds the query's bigrams to the query: "부산에" and "부산으로"
share "부산". The same field works on both backends, so neither depends on an analyzer the
other lacks (Neo4j's `cjk` analyzer would do bigrams too, but only there). Latin text gets no
grams: the engines' own tokenizers and stemmers handle it.

Queries are reduced to plain terms joined by OR: user text never reaches the engines' query
syntax, so `-`, `@`, quotes or `AND` in a question cannot break or change the query.
"""

from __future__ import annotations

import re
import unicodedata

# Hangul syllables and jamo, CJK ideographs, kana.
_CJK = "\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD = re.compile(r"[^\W_]+")
MAX_TERMS = 64


def grams(text: str) -> str:
    """Space-separated character bigrams of the CJK runs in `text` ('' when there are none)."""
    if text.isascii():  # NFKC leaves ASCII as it is: no CJK run (most rows a write carries)
        return ""
    out: list[str] = []
    for run in _CJK_RUN.findall(unicodedata.normalize("NFKC", text)):
        if len(run) == 1:
            out.append(run)
        out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return " ".join(dict.fromkeys(out))


def query_terms(text: str) -> list[str]:
    """Words and CJK bigrams of a query, lower-cased, de-duplicated, at most MAX_TERMS."""
    norm = unicodedata.normalize("NFKC", text).casefold()
    terms = [w for w in _WORD.findall(norm) if len(w) > 1 or _CJK_RUN.match(w)]
    terms += grams(norm).split()
    return list(dict.fromkeys(terms))[:MAX_TERMS]
