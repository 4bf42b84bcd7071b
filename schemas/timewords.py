"""Calendar arithmetic for time words, shared by ingest (a fact's time words) and retrieval
(a query's time window). Pure: every function takes its reference time.

All times are UTC; a period starts at midnight.
"""

from __future__ import annotations

import calendar
import re
from datetime import datetime, timedelta

UNIT_DAYS = {"day": 1, "week": 7}
WEEKDAYS = {name.lower(): i for i, name in enumerate(calendar.day_name)}
MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "couple of": 2,
    "few": 3,
    "a couple of": 2,
    "a few": 3,
}
# Longest first, so 'a couple of' is not read as 'a'.
NUMBER = r"(\d+|" + "|".join(sorted(NUMBERS, key=len, reverse=True)) + ")"
WEEKDAY = "(" + "|".join(WEEKDAYS) + ")"
MONTH = "(" + "|".join(MONTHS) + ")"


def count(word: str) -> int:
    return int(word) if word.isdigit() else NUMBERS[word]


def midnight(d: datetime) -> datetime:
    return d.replace(hour=0, minute=0, second=0, microsecond=0)


def shift_months(d: datetime, months: int) -> datetime:
    y, m = divmod(d.month - 1 + months, 12)
    year, month = d.year + y, m + 1
    return d.replace(year=year, month=month, day=min(d.day, calendar.monthrange(year, month)[1]))


def offset(ref: datetime, unit: str, n: int) -> datetime:
    """`ref` moved by `n` days, weeks, months or years (negative: back)."""
    if unit in UNIT_DAYS:
        return ref + timedelta(days=UNIT_DAYS[unit] * n)
    return shift_months(ref, n if unit == "month" else 12 * n)


def period_start(ref: datetime, unit: str, step: int) -> datetime:
    """Start of the week (Monday), month or year `step` periods from the one holding `ref`."""
    ref = midnight(ref)
    if unit == "day":
        return ref + timedelta(days=step)
    if unit == "week":
        monday = ref - timedelta(days=ref.weekday())
        return monday + timedelta(weeks=step)
    if unit == "month":
        return shift_months(ref.replace(day=1), step)
    return ref.replace(year=ref.year + step, month=1, day=1)


def month_year(month: int, which: str | None, ref: datetime) -> int:
    """The year of 'last March', 'next March', 'this March' or a bare 'March' said at `ref`:
    last = the last such month before this one, next = the first after it, this = this
    year's, and a bare month this year's unless it is still to come (people mostly speak of
    the past)."""
    if which == "next":
        return ref.year if month > ref.month else ref.year + 1
    if which == "last":
        return ref.year if month < ref.month else ref.year - 1
    return ref.year if (which == "this" or month <= ref.month) else ref.year - 1


def last_weekday(ref: datetime, weekday: int) -> datetime:
    """The most recent `weekday` strictly before `ref`'s day ('last Tuesday', a bare 'Tuesday')."""
    ref = midnight(ref)
    return ref - timedelta(days=(ref.weekday() - weekday - 1) % 7 + 1)


def next_weekday(ref: datetime, weekday: int) -> datetime:
    ref = midnight(ref)
    return ref + timedelta(days=(weekday - ref.weekday() - 1) % 7 + 1)


SPACES = re.compile(r"\s+")
