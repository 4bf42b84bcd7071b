"""Time expressions in a query -> a valid-time window, resolved against the time it was asked.

"Where did Alice live in 2022?", "what did she say last March", "작년 3월", "since 2019": the
words name a period, and kg reads them deterministically (no model) against `asked_at`:

- a year, month or day ("in 2022", "last March", "March 2023", "yesterday", "2022년에",
  "작년 3월", "어제"), or a calendar period relative to now ("last week", "지난달"): that period;
- "N days/weeks/months/years ago", "2주 전": one such unit, N back;
- "in the last N weeks", "최근 3개월": from N back up to `asked_at`;
- since / after / before / until a date ("since 2019", "2019년부터", "before May 2021"): a
  window open on one side;
- anchored on an event ("two weeks before she moved", "이사하기 2주 전"): the caller resolves
  the event through a fact search (`anchored_window`), else reports it as not understood.

The window filters facts (their validity must overlap it) and boosts episodes (their
reference time in it); see `kg.retrieval.search`. Only the first understood expression is
applied; the others are listed, marked ignored. English and Korean; anything else is left to
the text branches.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from kg.schemas.timeparse import DATE_RULES, Period, read_period
from kg.schemas.timeparse import ago as _ago
from kg.schemas.timewords import (
    NUMBER,
    NUMBERS,
    count,
    midnight,
    offset,
)
from kg.schemas.validation import UtcDatetime


class TimeExpression(BaseModel):
    """One time expression found in a query and what kg made of it."""

    text: str = Field(description="The words as they appear in the query.")
    start: UtcDatetime | None = Field(default=None, description="Window start (inclusive).")
    end: UtcDatetime | None = Field(default=None, description="Window end (exclusive).")
    understood: bool = True
    anchor: str | None = Field(
        default=None, description="Anchored forms: the event the offset is counted from."
    )
    direction: Literal["before", "after"] | None = Field(
        default=None, description="Anchored forms: before or after the event."
    )
    shift: int | None = Field(
        default=None, description="Anchored forms: how many units from the event (None: any)."
    )
    unit: Literal["day", "week", "month", "year"] | None = None
    note: str = Field(default="", description="How it was read, or why it was not.")

    @property
    def window(self) -> tuple[datetime | None, datetime | None]:
        return self.start, self.end


class QueryTime(BaseModel):
    """What a query said about time: shown by `--explain` and in `SearchResults.time`."""

    asked_at: UtcDatetime = Field(description="The reference time the words were read against.")
    expressions: list[TimeExpression] = Field(default_factory=list)
    applied: TimeExpression | None = Field(
        default=None, description="The expression whose window the search used."
    )
    rest: str = Field(description="The query without the applied expression's words.")

    def describe(self) -> list[str]:
        lines = []
        for e in self.expressions:
            used = e is self.applied
            status = "applied" if used else ("not understood" if not e.understood else "ignored")
            span = f" = {_span(e.start, e.end)}" if e.understood else ""
            lines.append(f"{e.text!r}{span} ({status}{': ' + e.note if e.note else ''})")
        return lines


def _span(start: datetime | None, end: datetime | None) -> str:
    a = start.strftime("%Y-%m-%d") if start else "…"
    b = (end - timedelta(microseconds=1)).strftime("%Y-%m-%d") if end else "…"
    return f"[{a} → {b}]"


# -- periods ------------------------------------------------------------------------------


def _last(text: str, ref: datetime, unit: str, n: int) -> TimeExpression:
    """'the last n units' (English and Korean): from n units before that day up to `ref`."""
    start = offset(midnight(ref), unit, -n)
    return _expr(text, start, ref, f"the last {n} {unit}(s) up to the time asked")


_EN_UNIT = r"(day|week|month|year)s?"
# The event of an anchored form: a clause up to punctuation or the question it qualifies.
_EVENT = (
    r"((?:she|he|they|i|we|you|it|[A-Z][\w-]*)\b"
    r"(?:(?!\s(?:what|where|who|whom|when|how|which|did|does|do|was|were|is|are)\b)[^,.?!;])*)"
)
_BARE_MONTHS = {"may", "march"}  # also common words: only with a qualifier or a year
_KO_NUM = {
    "한": 1,
    "두": 2,
    "세": 3,
    "네": 4,
    "다섯": 5,
    "여섯": 6,
    "일곱": 7,
    "여덟": 8,
    "아홉": 9,
    "열": 10,
}
_KO_NUMBER = r"(\d+|" + "|".join(sorted(_KO_NUM, key=len, reverse=True)) + ")"
_KO_UNIT = {"일": "day", "주": "week", "주일": "week", "달": "month", "개월": "month", "년": "year"}
_KO_UNIT_RE = "(주일|개월|일|주|달|년)"


def _ko_count(word: str) -> int:
    return int(word) if word.isdigit() else _KO_NUM[word]


# A date is the core every modifier (since, before...) wraps: the one time parser's rules
# (kg.schemas.timeparse), so a query's "March 2021" and a --valid-at "March 2021" agree.
_DATES = DATE_RULES
_DATE_ANY = "|".join(f"(?:{rx})" for rx, _, _ in _DATES)


def _date(text: str, ref: datetime) -> tuple[Period, str] | None:
    return read_period(text, ref)


# -- the scanner ----------------------------------------------------------------------------

Found = tuple[int, int, TimeExpression]


def _wrapped(query: str, ref: datetime) -> list[Found]:
    """since / after / before / until <date>, English and Korean."""
    out: list[Found] = []
    en = rf"\b(since|after|before|until|till|by)\s+((?:{_DATE_ANY}))"
    for m in re.finditer(en, query, re.IGNORECASE):
        got = _date(m[2], ref)
        if got is None:
            continue
        (a, b), _ = got
        word = m[1].lower()
        window = {
            "since": (a, None),
            "after": (b, None),
            "before": (None, a),
            "until": (None, b),
            "till": (None, b),
            "by": (None, b),
        }[word]
        out.append((m.start(), m.end(), _expr(m[0], *window, f"{word} {m[2]}")))
    ko = rf"((?:{_DATE_ANY}))\s*(부터|이후|이전|전에|전까지|까지)"
    for m in re.finditer(ko, query):
        got = _date(m[1], ref)
        if got is None:
            continue
        (a, b), _ = got
        suffix = m.groups()[-1]
        window = {
            "부터": (a, None),
            "이후": (b, None),
            "이전": (None, a),
            "전에": (None, a),
            "전까지": (None, a),
            "까지": (None, b),
        }[suffix]
        out.append((m.start(), m.end(), _expr(m[0], *window, f"{suffix}: open on one side")))
    return out


def _relative(query: str, ref: datetime) -> list[Found]:
    """N units ago, in the last N units, and the anchored forms."""
    out: list[Found] = []
    anchored = rf"\b{NUMBER}\s+{_EN_UNIT}\s+(before|after)\s+(?!{_DATE_ANY})" + _EVENT
    for m in re.finditer(anchored, query, re.IGNORECASE):
        n, unit, way = count(m[1].lower()), m[2].lower(), m[3].lower()
        out.append((m.start(), m.end(), _anchored(m[0], m.groups()[-1], way, n, unit)))
    for m in re.finditer(
        r"\b(before|after)\s+(?=(?:she|he|they|i|we)\s+\w)" + _EVENT, query, re.IGNORECASE
    ):
        out.append((m.start(), m.end(), _anchored(m[0], m[2], m[1].lower(), None, None)))
    for m in re.finditer(rf"\b{NUMBER}\s+{_EN_UNIT}\s+ago\b", query, re.IGNORECASE):
        n, unit = count(m[1].lower()), m[2].lower()
        out.append((m.start(), m.end(), _expr(m[0], *_ago(ref, unit, n), f"one {unit}, {n} back")))
    last_n = rf"\b(?:in|over|during)\s+the\s+(?:last|past)\s+(?:{NUMBER}\s+)?{_EN_UNIT}"
    for m in re.finditer(last_n, query, re.IGNORECASE):
        n, unit = count(m[1].lower()) if m[1] else 1, m[2].lower()
        out.append((m.start(), m.end(), _last(m[0], ref, unit, n)))
    for m in re.finditer(rf"(\S+기)\s*{_KO_NUMBER}\s?{_KO_UNIT_RE}\s?(전|후)", query):
        way = "before" if m[4] == "전" else "after"
        out.append(
            (m.start(), m.end(), _anchored(m[0], m[1], way, _ko_count(m[2]), _KO_UNIT[m[3]]))
        )
    for m in re.finditer(rf"{_KO_NUMBER}\s?{_KO_UNIT_RE}\s?전", query):
        n, unit = _ko_count(m[1]), _KO_UNIT[m[2]]
        out.append((m.start(), m.end(), _expr(m[0], *_ago(ref, unit, n), f"one {unit}, {n} back")))
    for m in re.finditer(rf"(?:최근|지난)\s?{_KO_NUMBER}\s?{_KO_UNIT_RE}", query):
        n, unit = _ko_count(m[1]), _KO_UNIT[m[2]]
        out.append((m.start(), m.end(), _last(m[0], ref, unit, n)))
    return out


def _plain(query: str, ref: datetime) -> list[Found]:
    out: list[Found] = []
    for rx, period, note in _DATES:
        for m in re.finditer(rf"(?<!\w){rx}" if rx[0] not in "(" else rx, query, re.IGNORECASE):
            if m[0].lower() in _BARE_MONTHS and not _qualified(query, m.start()):
                continue
            try:
                a, b = period(ref, m)
            except (ValueError, KeyError):
                continue
            lead = re.search(r"\b(?:in|during|of|on|throughout)\s+$", query[: m.start()], re.I)
            start = lead.start() if lead else m.start()
            out.append((start, m.end(), _expr(query[start : m.end()], a, b, note)))
    return out


def _qualified(query: str, at: int) -> bool:
    return bool(
        re.search(
            r"\b(in|during|since|before|after|until|last|this|next)\s+$", query[:at], re.IGNORECASE
        )
    )


def _expr(text: str, start: datetime | None, end: datetime | None, note: str) -> TimeExpression:
    return TimeExpression(text=text, start=start, end=end, note=note)


def read_time(query: str, asked_at: datetime) -> QueryTime:
    """The time expressions of `query`, read against `asked_at` (timezone-aware).

    Longer matches win over the ones they contain ("since March 2021" over "March 2021" over
    "2021"); then the first in the query is applied, and anchored forms are left for the
    caller to resolve (`anchored`)."""
    ref = asked_at.astimezone(UTC)
    found = _wrapped(query, ref) + _relative(query, ref) + _plain(query, ref)
    found.sort(key=lambda f: (f[0], -(f[1] - f[0])))
    kept: list[Found] = []
    for f in found:
        if all(f[1] <= k[0] or f[0] >= k[1] for k in kept):
            kept.append(f)
    exprs = [e for _, _, e in kept]
    applied = next((e for e in exprs if e.understood), None)
    return QueryTime(
        asked_at=ref, expressions=exprs, applied=applied, rest=_without(query, kept, applied)
    )


def _without(query: str, kept: list[Found], applied: TimeExpression | None) -> str:
    for start, end, e in kept:
        if e is applied:
            query = query[:start] + " " + query[end:]
    return re.sub(r"\s+", " ", query).strip()


def _anchored(text: str, event: str, way: str, n: int | None, unit: str | None) -> TimeExpression:
    what = f"{n} {unit}(s) {way}" if n is not None else way
    fields: dict[str, Any] = {"direction": way, "shift": n, "unit": unit}
    return TimeExpression(
        text=text, anchor=event.strip(), understood=False, note=f"{what} an event", **fields
    )


def anchored_window(
    expr: TimeExpression, event_at: datetime
) -> tuple[datetime | None, datetime | None]:
    """The window of an anchored expression once its event's time is known: 'two weeks
    before X' is one week starting two weeks before X's day, 'before X' everything up to X."""
    day = midnight(event_at.astimezone(UTC))
    if expr.shift is None or expr.unit is None:
        return (None, event_at) if expr.direction == "before" else (event_at, None)
    start = offset(day, expr.unit, -expr.shift if expr.direction == "before" else expr.shift)
    return start, offset(start, expr.unit, 1)


__all__ = ["NUMBERS", "QueryTime", "TimeExpression", "anchored_window", "read_time"]
