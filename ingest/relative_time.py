"""Resolve the time words of an extracted fact against the episode's reference time.

Deterministic on purpose: small models get date arithmetic wrong, so the model reports the
words ("2 weeks ago", "last Tuesday") and kg does the arithmetic. Unrecognised text resolves
to None, and the caller falls back to the reference time.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime, timedelta

_UNITS = {"day": 1, "week": 7}
_WEEKDAYS = {name.lower(): i for i, name in enumerate(calendar.day_name)}
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
            "seven": 7, "eight": 8, "nine": 9, "ten": 10, "couple of": 2, "few": 3,
            "a couple of": 2, "a few": 3}  # fmt: skip
# Longest first, so 'a couple of' is not read as 'a'.
_NUMBER = r"(\d+|" + "|".join(sorted(_NUMBERS, key=len, reverse=True)) + ")"


def _midnight(d: datetime) -> datetime:
    return d.replace(hour=0, minute=0, second=0, microsecond=0)


def _shift_months(d: datetime, months: int) -> datetime:
    y, m = divmod(d.month - 1 + months, 12)
    year, month = d.year + y, m + 1
    return d.replace(year=year, month=month, day=min(d.day, calendar.monthrange(year, month)[1]))


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
    ref = _midnight(reference.astimezone(UTC))
    if m := re.fullmatch(rf"in {_NUMBER} (day|week|month|year)s?", s):
        return _offset(ref, m[2], _count(m[1]))
    s = re.sub(r"^(since|from|on|in|as of|starting)\s+", "", s)
    fixed = {"today": ref, "now": ref, "yesterday": ref - timedelta(days=1),
             "tomorrow": ref + timedelta(days=1)}  # fmt: skip
    if s in fixed:
        return fixed[s]
    if m := re.fullmatch(r"^(\d{4})$", s):
        return datetime(int(m[1]), 1, 1, tzinfo=UTC)
    if m := re.fullmatch(rf"{_NUMBER} (day|week|month|year)s? ago", s):
        return _offset(ref, m[2], -_count(m[1]))
    if m := re.fullmatch(r"(last|next|this) (week|month|year)", s):
        step = {"last": -1, "next": 1, "this": 0}[m[1]]
        return _period_start(ref, m[2], step)
    if m := re.fullmatch(r"(last|next|this)? ?(" + "|".join(_WEEKDAYS) + ")", s):
        target = _WEEKDAYS[m[2]]
        if m[1] == "next":
            return ref + timedelta(days=(target - ref.weekday() - 1) % 7 + 1)
        # 'last Tuesday' and a bare 'Tuesday' in past-tense speech: the most recent one before.
        return ref - timedelta(days=(ref.weekday() - target - 1) % 7 + 1)
    if m := re.fullmatch(r"(last|next|this)? ?(" + "|".join(_MONTHS) + r")(?: (\d{4}))?", s):
        month = _MONTHS[m[2]]
        if m[3]:
            return datetime(int(m[3]), month, 1, tzinfo=UTC)
        if m[1] == "next":  # the first such month after this one
            year = ref.year if month > ref.month else ref.year + 1
        elif m[1] == "last":  # the last such month before this one
            year = ref.year if month < ref.month else ref.year - 1
        else:  # 'this March' or a bare 'March': this year's, unless it is still to come
            year = ref.year if (m[1] == "this" or month <= ref.month) else ref.year - 1
        return datetime(year, month, 1, tzinfo=UTC)
    return None


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word]


def _offset(ref: datetime, unit: str, n: int) -> datetime:
    if unit in _UNITS:
        return ref + timedelta(days=_UNITS[unit] * n)
    return _shift_months(ref, n if unit == "month" else 12 * n)


def _period_start(ref: datetime, unit: str, step: int) -> datetime:
    if unit == "week":
        monday = ref - timedelta(days=ref.weekday())
        return monday + timedelta(weeks=step)
    if unit == "month":
        return _shift_months(ref.replace(day=1), step)
    return ref.replace(year=ref.year + step, month=1, day=1)
