"""What the full-text branch is asked: the query without its question words.

In a conversation, "what", "when", "did" and "how" are in the other speaker's questions,
not in the turn that answers: "When did Caroline go to the LGBTQ support group?" matched
"Melanie: How did it go?" on "did" and "go". Dropping interrogatives and auxiliaries from the
full-text query (the cosine branch still embeds the whole question) took BM25's R@5 on
LoCoMo's development conversations from 48.6 to 53.8. English only; other languages pass
through unchanged.
"""

from __future__ import annotations

import re

QUESTION_WORDS = frozenset(
    {
        "what",
        "when",
        "where",
        "who",
        "whom",
        "which",
        "why",
        "how",
        "did",
        "do",
        "does",
        "has",
        "have",
        "had",
        "is",
        "was",
        "were",
        "are",
        "would",
        "could",
        "should",
        "can",
    }
)
_QUESTION_WORD = re.compile(r"\b(?:" + "|".join(sorted(QUESTION_WORDS)) + r")\b", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


def keyword_query(query: str) -> str:
    """`query` without question words; the query itself when nothing else would be left."""
    kept = _SPACES.sub(" ", _QUESTION_WORD.sub(" ", query)).strip()
    return kept if re.search(r"\w", kept) else query
