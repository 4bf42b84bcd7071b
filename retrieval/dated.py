"""Questions that ask *when*, and turns that say when.

"When did Caroline go to the LGBTQ support group?" is answered by "I went to a LGBTQ support
group yesterday": the turn that dates the event, by its own words, against the time it was
said. The cosine branch favours turns phrased like the question instead (the other speaker's
"When did you go?"), so on LoCoMo's temporal questions the fused default fell below BM25 alone.
A question that asks for a time therefore lifts the episodes that say one
(`SearchConfig.dated_boost`, kg.retrieval.search). Deterministic, English and Korean; the words
of `kg.schemas.timewords`.
"""

from __future__ import annotations

import re

from kg.schemas.timewords import MONTHS, WEEKDAYS

_ASKS = re.compile(
    r"^\s*when\b|\bwhen (?:did|does|do|is|was|were|will|has|had|are|would)\b"
    r"|\b(?:what|which) (?:year|month|day|date|week|weekend|time of year)\b"
    r"|\bhow long ago\b|\bsince when\b|\bwhat time\b"
    r"|언제|몇 ?년|몇 ?월|며칠",
    re.IGNORECASE,
)

_EN_WORDS = (
    r"yesterday|today|tonight|tomorrow|recently|lately|ago|earlier this|later this"
    r"|(?:last|this|next|past|coming|previous) (?:few |couple of |past )?"
    r"(?:night|week|weekend|month|year|summer|winter|spring|fall|autumn|morning|evening"
    r"|semester|season|days|weeks|months|years|" + "|".join(WEEKDAYS) + ")"
    r"|(?:on|last|this|next) (?:" + "|".join(WEEKDAYS) + ")"
    r"|(?:in|since|last|this|next|early|late|mid|until) (?:" + "|".join(MONTHS) + ")"
    r"|\b(?:19|20)\d\d\b"
)
_SAYS = re.compile(
    r"\b(?:" + _EN_WORDS + r")\b|어제|오늘|내일|그저께|지난주|지난달|작년|올해|내년"
    r"|이번 ?주|다음 ?주|\d+ ?(?:일|주|달|개월|년) ?전",
    re.IGNORECASE,
)


def asks_when(query: str) -> bool:
    """Whether the question asks for a time ("When did...", "what year", "언제")."""
    return _ASKS.search(query) is not None


def says_when(text: str) -> bool:
    """Whether the text dates something by its own words ("yesterday", "last weekend",
    "next month", "in May", "2022", "지난주")."""
    return _SAYS.search(text) is not None
