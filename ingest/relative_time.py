"""Resolve the time words of an extracted fact against the episode's reference time.

Deterministic on purpose: small models get date arithmetic wrong, so the model reports the
words ("2 weeks ago", "last Tuesday") and kg does the arithmetic. Unrecognised text resolves
to None, and the caller falls back to the reference time.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from kg.schemas.timewords import (
    MONTHS,
    NUMBER,
    WEEKDAYS,
    count,
    last_weekday,
    midnight,
    month_year,
    next_weekday,
    offset,
    period_start,
)


def resolve_time(text: str | None, reference: datetime) -> datetime | None:
    """The time the words name, or None: unrecognised words, and times outside years 1-9999
    ('in 9999 years', '99999999999 days ago', an ISO time in year 0 once in UTC) alike."""
    if text is None or not text.strip():
        return None
    try:
        return _resolve(text.strip(), reference)
    except (ValueError, OverflowError):  # out of datetime's range, or a 5000-digit count
        return None


def _resolve(raw: str, reference: datetime) -> datetime | None:
    try:  # ISO first: '2024-03-01', '2024-03-01T09:00:00+09:00'
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    except ValueError:
        pass
    s = re.sub(r"\s+", " ", raw.lower()).strip(" .")
    ref = midnight(reference.astimezone(UTC))
    if m := re.fullmatch(rf"in {NUMBER} (day|week|month|year)s?", s):
        return offset(ref, m[2], count(m[1]))
    s = re.sub(r"^(since|from|on|in|as of|starting)\s+", "", s)
    fixed = {
        "today": ref,
        "now": ref,
        "yesterday": ref - timedelta(days=1),
        "tomorrow": ref + timedelta(days=1),
    }
    if s in fixed:
        return fixed[s]
    if m := re.fullmatch(r"^(\d{4})$", s):
        return datetime(int(m[1]), 1, 1, tzinfo=UTC)
    if m := re.fullmatch(rf"{NUMBER} (day|week|month|year)s? ago", s):
        return offset(ref, m[2], -count(m[1]))
    if m := re.fullmatch(r"(last|next|this) (week|month|year)", s):
        step = {"last": -1, "next": 1, "this": 0}[m[1]]
        return period_start(ref, m[2], step)
    if m := re.fullmatch(r"(last|next|this)? ?(" + "|".join(WEEKDAYS) + ")", s):
        target = WEEKDAYS[m[2]]
        if m[1] == "next":
            return next_weekday(ref, target)
        # 'last Tuesday' and a bare 'Tuesday' in past-tense speech: the most recent one before.
        return last_weekday(ref, target)
    if m := re.fullmatch(r"(last|next|this)? ?(" + "|".join(MONTHS) + r")(?: (\d{4}))?", s):
        month = MONTHS[m[2]]
        year = int(m[3]) if m[3] else month_year(month, m[1], ref)
        return datetime(year, month, 1, tzinfo=UTC)
    return None
