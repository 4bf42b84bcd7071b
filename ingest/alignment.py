"""Where in the episode a model's quote comes from: the closest span, by token alignment.

Small models do not copy: SmolLM2-135M's quotes were near the turn's words but rarely the
words themselves, and kg's exact-substring check dropped 113 of the 115 facts it proposed.
So a quote is aligned to each line of the episode (a local alignment of words,
Smith-Waterman style, where a word matches its inflections and a speaker's name matches that
speaker's "I"/"my" as a function word would) and scored by the share of the quote's weight it
matched (content words weigh 1, function words 0.25; function words alone, or a name alone,
are no evidence). A fact is cited by the
episode's own words: the span its quote aligned to. A quote that aligns to nothing, or below
the threshold, is no quote, and the fact is dropped as before.

An exact substring scores 1.0 whatever the script (CJK has no spaces to split words on), so
every quote kg kept before is kept now. The default threshold is the one measured on LoCoMo
dev turns (benchmarks/extraction_quality.py; docs/local-models.md).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

DEFAULT_THRESHOLD = 0.45  # chosen on LoCoMo dev turns, docs/local-models.md
MAX_QUOTE_WORDS = 80  # longer quotes (a looping model) count only when exact
_CHUNK_WORDS = 200  # longer lines are aligned sentence by sentence
_WORD = re.compile(r"\w+(?:['\u2019]\w+)?", re.U)
_SENTENCE = re.compile(r"[^.!?\u3002\uff01\uff1f\n]+[.!?\u3002\uff01\uff1f]*")
FIRST_PERSON = frozenset({"i", "me", "my", "myself", "mine", "i'm", "i've", "i'd", "i'll"})
_FUNCTION_WORDS = """a an the and or but if of to in on at by for with from as is am are was were
be been being it its it's this that these those there here so too very just really i me my mine
you your yours we our us he him his she her they them their what which who whom do does did
doing have has had having not no yes oh hey hi well also about up out over into than then can
could would should will shall may might must i'm i've i'd i'll you're that's don't didn't can't
won't gonna wanna got get"""
STOPWORDS = frozenset(_FUNCTION_WORDS.split())
_STOP_WEIGHT = 0.25
_GAP = 0.35  # per word skipped on either side, times its weight
_MISMATCH = 0.5


def fold(text: str) -> str:
    """Case, width and curly apostrophes folded away."""
    return unicodedata.normalize("NFKC", text).replace("\u2019", "'").casefold()


def words(text: str) -> list[tuple[str, int, int]]:
    """(folded word, start, end): offsets into `text` itself."""
    return [(fold(m.group()), m.start(), m.end()) for m in _WORD.finditer(text)]


def stem(word: str) -> str:
    """A crude suffix strip, enough to match 'paint', 'painted', 'painting' and 'paints'."""
    word = word.removesuffix("'s")
    for suffix in ("ing", "ed", "es", "s", "ly"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def weight(word: str) -> float:
    return _STOP_WEIGHT if word in STOPWORDS else 1.0


@dataclass(frozen=True)
class Span:
    """A line's best span for a quote: the score (0 to 1) and character offsets in the line."""

    line: int
    score: float
    start: int
    end: int


def _match(q: str, t: str, name: str | None) -> float:
    """1 for the same word (or inflection); a function word's weight for a speaker's name
    against their "I" (it says who, not what); 0 otherwise."""
    if q == t or stem(q) == stem(t):
        return 1.0
    return _STOP_WEIGHT if name is not None and q == name and t in FIRST_PERSON else 0.0


def content_words(text: str) -> set[str]:
    """The stemmed words of `text` that are not function words."""
    return {stem(w) for w, _, _ in words(text) if w not in STOPWORDS}


def _exact(quote: str, text: str) -> tuple[float, int, int] | None:
    q, t = " ".join(fold(quote).split()), " ".join(fold(text).split())
    if not q or q not in t:
        return None
    at = text.casefold().find(quote.strip().casefold())
    if at >= 0 and len(text.casefold()) == len(text):  # offsets still index `text`
        return 1.0, at, at + len(quote.strip())
    return 1.0, 0, len(text)  # spacing or folding differed: cite the whole line


def _local(q: list[str], t: list[tuple[str, int, int]], name: str | None) -> tuple[float, int, int]:
    """Smith-Waterman over words: (matched share of the quote's weight, start, end)."""
    total = sum(weight(w) for w in q)
    cols = len(t) + 1
    prev_h, prev_m, prev_c, prev_s = [0.0] * cols, [0.0] * cols, [0] * cols, [0] * cols
    best, found = 0.0, (0.0, 0, 0)
    for word in q:
        w = weight(word)
        h, m, c, s = [0.0] * cols, [0.0] * cols, [0] * cols, list(range(cols))
        for j in range(1, cols):
            same = _match(word, t[j - 1][0], name)
            diag = prev_h[j - 1] + (w * same if same else -_MISMATCH * w)
            up = prev_h[j] - _GAP * w  # a quote word the text lacks
            left = h[j - 1] - _GAP * weight(t[j - 1][0])  # a text word the quote lacks
            top = max(0.0, diag, up, left)
            h[j] = top
            if top == 0.0:
                continue
            if top == diag:
                fresh = prev_h[j - 1] == 0.0
                m[j] = (0.0 if fresh else prev_m[j - 1]) + w * same
                c[j] = (0 if fresh else prev_c[j - 1]) + (same == 1.0 and w == 1.0)
                s[j] = j - 1 if fresh else prev_s[j - 1]
            elif top == up:
                m[j], c[j], s[j] = prev_m[j], prev_c[j], prev_s[j]
            else:
                m[j], c[j], s[j] = m[j - 1], c[j - 1], s[j - 1]
            if top > best and c[j] > 0:  # function words alone are no evidence
                best, found = top, (m[j] / total, t[s[j]][1], t[j - 1][2])
        prev_h, prev_m, prev_c, prev_s = h, m, c, s
    score, start, end = found
    return round(min(score, 1.0), 4), start, end


def align_line(quote: str, text: str, speaker: str | None = None) -> tuple[float, int, int]:
    """(score, start, end) of the span of `text` that best aligns with `quote`."""
    if (exact := _exact(quote, text)) is not None:
        return exact
    q = [w for w, _, _ in words(quote)]
    t = words(text)
    if not q or not t or len(q) > MAX_QUOTE_WORDS:
        return 0.0, 0, 0
    name = fold(speaker).split()[0] if speaker and speaker.split() else None
    if len(t) <= _CHUNK_WORDS:
        return _local(q, t, name)
    best = (0.0, 0, 0)
    for sentence in _SENTENCE.finditer(text):  # a long text: sentence by sentence
        part = [
            (w, a + sentence.start(), b + sentence.start()) for w, a, b in words(sentence.group())
        ]
        if part and (found := _local(q, part[: _CHUNK_WORDS * 2], name))[0] > best[0]:
            best = found
    return best


def align(quote: str, lines: list[tuple[str | None, str]]) -> list[Span]:
    """Each line's best span for the quote, best first."""
    spans = [Span(i, *align_line(quote, text, who)) for i, (who, text) in enumerate(lines)]
    return sorted(spans, key=lambda sp: -sp.score)


_PRONOUNS = {
    "i": "{0}",
    "me": "{0}",
    "my": "{0}'s",
    "mine": "{0}'s",
    "myself": "{0}",
    "i'm": "{0} is",
    "i've": "{0} has",
    "i'd": "{0} would",
    "i'll": "{0} will",
}


def third_person(span: str, speaker: str | None) -> str:
    """The episode's own words about its speaker, "I" made the speaker's name."""
    if not speaker:
        return span.strip()
    return _WORD.sub(
        lambda m: _PRONOUNS.get(fold(m.group()), m.group()).format(speaker), span
    ).strip()
