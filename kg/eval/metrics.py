"""What `kg eval` counts: Wilson intervals, percentiles, and how a context block is read.

A context block (`kg.retrieval.render_context`) has a `<facts>` section, whose lines assert
what is true, and an `<episodes>` section, whose lines quote what was said when. So:

- a line is **current** when it is a fact line not marked "(no longer true)";
- an item is **stale in context** when one of its `stale_answers` appears in a current line
  (that also names the item's `subject`, when it has one): a superseded value presented as
  true. Quoted episodes and closed facts are history, dated or marked, and do not count (they
  are reported apart as `stale_quoted`);
- an answer *appears* in a line when its normalised words (case, punctuation and underscores
  folded) occur there as whole words, after removing the gold answers' own occurrences (so
  "Chelsea" is not found inside a gold "Chelsea Women").
"""

from __future__ import annotations

import math
import re
import statistics
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

CLOSED_MARK = "(no longer true)"
_SECTION = re.compile(r"^</?(facts|entities|episodes|communities)>$")
_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


class Rate(BaseModel):
    """k of n, with its Wilson 95% interval."""

    k: int
    n: int

    @property
    def value(self) -> float | None:
        return self.k / self.n if self.n else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson(self.k, self.n) if self.n else None

    def show(self, counts: bool = False) -> str:
        """'12.5 [2.2-47.1]' (percent, Wilson 95%), with '3/24' when `counts`."""
        if not self.n:
            return "—"
        lo, hi = wilson(self.k, self.n)
        shown = f"{100 * self.k / self.n:.1f} [{100 * lo:.1f}-{100 * hi:.1f}]"
        return f"{shown} {self.k}/{self.n}" if counts else shown

    def __add__(self, other: Rate) -> Rate:
        return Rate(k=self.k + other.k, n=self.n + other.n)


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (95% by default)."""
    if n <= 0:
        raise ValueError("wilson needs n > 0")
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between closest ranks; 0 for no values."""
    if not values:
        return 0.0
    if len(values) == 1:
        return float(values[0])
    return float(statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1])


def normalise(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_NON_WORD.sub(" ", folded).split())


def appears(answer: str, line: str, *, masking: Sequence[str] = ()) -> bool:
    """`answer` occurs in `line` as whole words, outside any of the `masking` answers."""
    needle = normalise(answer)
    if not needle:
        return False
    hay = f" {normalise(line)} "
    for mask in sorted((normalise(m) for m in masking), key=len, reverse=True):
        if mask and mask != needle and needle in mask:
            hay = hay.replace(f" {mask} ", " | ")
    return f" {needle} " in hay


@dataclass(frozen=True)
class Line:
    section: str
    text: str

    @property
    def current(self) -> bool:
        return self.section == "facts" and CLOSED_MARK not in self.text


def lines(block: str) -> list[Line]:
    """The record lines of a context block, each with its section."""
    out: list[Line] = []
    section = ""
    for raw in block.splitlines():
        m = _SECTION.match(raw.strip())
        if m:
            section = m[1] if not raw.strip().startswith("</") else ""
        elif section and raw.startswith("- "):
            out.append(Line(section, raw))
    return out


def stale_in(
    block: str, stale: Sequence[str], gold: Sequence[str], subject: str | None = None
) -> tuple[bool, bool]:
    """(a stale answer in a current line, a stale answer in any line), counting only lines
    that name `subject` when one is given."""
    stale = [s for s in stale if normalise(s) not in {normalise(g) for g in gold}]
    current = anywhere = False
    for line in lines(block):
        if subject is not None and not appears(subject, line.text):
            continue
        if any(appears(s, line.text, masking=gold) for s in stale):
            anywhere = True
            current = current or line.current
    return current, anywhere


def gold_in(block: str, gold: Sequence[str]) -> bool:
    """A gold answer anywhere in the block: a current fact, a quoted turn, or a closed fact
    (the answer to "where did she live in 2021?" is a value closed since)."""
    return any(appears(g, line.text) for line in lines(block) for g in gold)
