"""The one time parser every surface reads a time with: Python arguments, CLI flags, ingest
files, HTTP fields and MCP arguments.

It takes what people and LLMs write: full ISO-8601 ('2024-03-01T09:00:00Z', an offset, or none
= UTC), a date ('2024-03-01'), a year-month ('2024-03'), a year ('2024'), and the time words
search reads ('last year', 'March 2021', 'yesterday', '3 weeks ago', '작년'), against
`asked_at` (default now). A word names a period; `parse_time` gives its start, `parse_period`
the whole [start, end). A Python datetime must carry its zone (a naive one is local time to
whoever made it, so it is refused rather than guessed); a string without one is UTC.
Anything else is an `InputError` naming the field and giving an example.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, ValidationInfo

from kg.schemas.errors import InputError
from kg.schemas.timewords import (
    MONTHS,
    NUMBER,
    WEEKDAY,
    WEEKDAYS,
    count,
    last_weekday,
    midnight,
    month_year,
    next_weekday,
    offset,
    period_start,
)
from kg.schemas.validation import NUMBER_RE, TIME_HINT, no_number_times, to_utc

__all__ = [
    "DATE_RULES",
    "EXAMPLE",
    "Period",
    "TimeInput",
    "parse_period",
    "parse_time",
    "read_period",
]

EXAMPLE = "e.g. 2024-03-01, 2024-03-01T09:00:00Z, 2024, March 2021 or 'last year'"
Period = tuple[datetime, datetime]
_DATE_ONLY = re.compile(r"([0-9]{4})(?:-([0-9]{2})(?:-([0-9]{2}))?)?")  # fullmatch


# -- periods ------------------------------------------------------------------------------


def _year(y: int) -> Period:
    return datetime(y, 1, 1, tzinfo=UTC), datetime(y + 1, 1, 1, tzinfo=UTC)


def _month(y: int, m: int) -> Period:
    start = datetime(y, m, 1, tzinfo=UTC)
    return start, period_start(start, "month", 1)


def _day(d: datetime) -> Period:
    d = midnight(d)
    return d, d + timedelta(days=1)


def _unit(ref: datetime, unit: str, step: int) -> Period:
    """The week, month or year `step` periods from the one holding `ref`."""
    start = period_start(ref, unit, step)
    return start, period_start(start, unit, 1)


def _weekend(ref: datetime, which: str) -> Period:
    """Last weekend: the one before this week; this weekend: this week's; next: the one after."""
    monday = period_start(ref, "week", {"last": -1, "this": 0, "next": 1}[which])
    return monday + timedelta(days=5), monday + timedelta(days=7)


def ago(ref: datetime, unit: str, n: int) -> Period:
    """'n units ago': one such unit, starting n units before `ref`'s day."""
    start = offset(midnight(ref), unit, -n)
    return start, offset(start, unit, 1)


YEAR = r"(1[5-9]\d\d|20\d\d|21\d\d)"
MONTH_RE = "(" + "|".join(MONTHS) + r"|jan|feb|mar|apr|jun|jul|aug|sept?|oct|nov|dec)"
_MONTH_ABBR = {name[:3]: i for name, i in MONTHS.items()} | {"sept": 9}
_KO_YEAR_WORD = {"재작년": -2, "작년": -1, "지난해": -1, "올해": 0, "금년": 0, "내년": 1}
_KO_PERIOD = {"지난": -1, "저번": -1, "이번": 0, "다음": 1}


def month_of(word: str) -> int:
    word = word.lower()
    return MONTHS.get(word) or _MONTH_ABBR[word[:4] if word.startswith("sept") else word[:3]]


# A date, as a regex and how to make its period from the reference time and the match; search
# (kg.retrieval.when) finds these inside a query and wraps them in since / before / until.
DateRule = tuple[str, Callable[[datetime, re.Match[str]], Period], str]

DATE_RULES: list[DateRule] = [
    (
        r"(\d{4})-(\d{2})-(\d{2})",
        lambda r, m: _day(datetime(int(m[1]), int(m[2]), int(m[3]), tzinfo=UTC)),
        "that day",
    ),
    (r"(\d{4})-(\d{2})\b", lambda r, m: _month(int(m[1]), int(m[2])), "that month"),
    (
        rf"{MONTH_RE}\.? (\d{{1,2}})(?:st|nd|rd|th)?,? {YEAR}\b",
        lambda r, m: _day(datetime(int(m[3]), month_of(m[1]), int(m[2]), tzinfo=UTC)),
        "that day",
    ),
    (
        rf"(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?{MONTH_RE}\.?,? {YEAR}\b",
        lambda r, m: _day(datetime(int(m[3]), month_of(m[2]), int(m[1]), tzinfo=UTC)),
        "that day",
    ),
    (
        rf"(?:(last|this|next) )?{MONTH_RE}\.?,? (?:of )?{YEAR}",
        lambda r, m: _month(int(m[3]), month_of(m[2])),
        "that month",
    ),
    (
        rf"(last|this|next) {MONTH_RE}\b",
        lambda r, m: _month(month_year(month_of(m[2]), m[1], r), month_of(m[2])),
        "that month, the nearest before (last) or after (next) the time asked",
    ),
    (
        rf"(?:(?<=in )|(?<=during )|(?<=since )|(?<=before )|(?<=after )|(?<=until ))"
        rf"{MONTH_RE}\b",
        lambda r, m: _month(month_year(month_of(m[1]), None, r), month_of(m[1])),
        "that month of this year, or of last year if it is still to come",
    ),
    (
        r"(yesterday|today|tomorrow|last night|tonight)",
        lambda r, m: _day(
            r
            + timedelta(
                days={"yesterday": -1, "last night": -1, "tomorrow": 1}.get(m[1].lower(), 0)
            )
        ),
        "that day",
    ),
    (
        r"(last|this|next) weekend\b",
        lambda r, m: _weekend(r, m[1].lower()),
        "that Saturday and Sunday",
    ),
    (
        r"(last|this|next) (week|month|year)\b",
        lambda r, m: _unit(r, m[2].lower(), {"last": -1, "this": 0, "next": 1}[m[1].lower()]),
        "that calendar period",
    ),
    (
        rf"(last|next|on) {WEEKDAY}",
        lambda r, m: _day(
            (next_weekday if m[1].lower() == "next" else last_weekday)(r, WEEKDAYS[m[2].lower()])
        ),
        "that day",
    ),
    (
        rf"(?<![$€£+\-*/=] )(?<![$€£+\-*/=]){YEAR}\b(?![-/.]\d)(?! ?[+\-*/=%])",
        lambda r, m: _year(int(m[1])),
        "that year",
    ),
    # Korean
    (r"(\d{4})년\s*(\d{1,2})월", lambda r, m: _month(int(m[1]), int(m[2])), "that month"),
    (
        r"(재작년|작년|지난해|올해|금년|내년)\s*(\d{1,2})월",
        lambda r, m: _month(r.year + _KO_YEAR_WORD[m[1]], int(m[2])),
        "that month",
    ),
    (r"(\d{4})년", lambda r, m: _year(int(m[1])), "that year"),
    (
        r"(재작년|작년|지난해|올해|금년|내년)",
        lambda r, m: _year(r.year + _KO_YEAR_WORD[m[1]]),
        "that year",
    ),
    (
        r"(지난|저번|이번|다음)\s?(주|달)",
        lambda r, m: _unit(r, "week" if m[2] == "주" else "month", _KO_PERIOD[m[1]]),
        "that calendar period",
    ),
    (
        r"(그저께|그제|어제|오늘|내일)",
        lambda r, m: _day(
            r + timedelta(days={"그저께": -2, "그제": -2, "어제": -1, "내일": 1}.get(m[1], 0))
        ),
        "that day",
    ),
    (
        r"(?<![\d년])(\d{1,2})월",
        lambda r, m: _month(month_year(int(m[1]), None, r), int(m[1])),
        "that month of this year, or of last year if it is still to come",
    ),
]
# Said on its own (not inside a query): a bare month name, and 'N units ago'.
_ALONE: list[DateRule] = [
    (
        MONTH_RE,
        lambda r, m: _month(month_year(month_of(m[1]), None, r), month_of(m[1])),
        "that month of this year, or of last year if it is still to come",
    ),
    (
        rf"{NUMBER}\s+(day|week|month|year)s?\s+ago",
        lambda r, m: ago(r, m[2].lower(), count(m[1].lower())),
        "one such unit, that many back",
    ),
]


def read_period(text: str, ref: datetime) -> tuple[Period, str] | None:
    """The period a date rule reads the whole of `text` as at `ref` (UTC), and how it was
    read; None when no rule reads it (or its numbers are no date, such as 2021-02-30)."""
    for rx, period, note in DATE_RULES:
        if m := re.fullmatch(rx, text, re.IGNORECASE):
            try:
                return period(ref, m), note
            except (ValueError, KeyError, OverflowError):
                return None
    return None


# -- the parser ---------------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(UTC)


def _utc(value: datetime, field: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise InputError(f"{field}: naive datetime; give it a timezone (e.g. tzinfo=UTC)")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InputError(
            f"{field}: {value.isoformat()} is outside years 1 to 9999 once converted to UTC"
        ) from None


def _after(start: datetime, unit: str) -> datetime:
    """The end of the day, month or year starting at `start` (of the instant for ''),
    clamped to the last representable time at the end of year 9999."""
    try:
        return period_start(start, unit, 1) if unit else start + timedelta(microseconds=1)
    except (ValueError, OverflowError):
        return datetime.max.replace(tzinfo=UTC)


def _iso(raw: str, field: str) -> datetime | None:
    """A full ISO-8601 time (no offset = UTC), or None when `raw` is not one."""
    try:
        value = datetime.fromisoformat(re.sub(r"[zZ]$", "+00:00", raw))
    except ValueError:
        return None
    return _utc(value if value.tzinfo else value.replace(tzinfo=UTC), field)


def _words(raw: str, ref: datetime) -> Period | None:
    text = " ".join(raw.split())
    if text.lower() == "now":
        return ref, _after(ref, "")
    if got := read_period(text, ref):
        return got[0]
    for rx, period, _ in _ALONE:
        if m := re.fullmatch(rx, text, re.IGNORECASE):
            try:
                return period(ref, m)
            except (ValueError, KeyError, OverflowError):
                return None
    return None


def parse_period(
    value: str | datetime, *, asked_at: datetime | None = None, field: str = "time"
) -> Period:
    """The [start, end) `value` names: a day, month or year for a date, year-month, year or
    time word; one microsecond for an instant. Words are read against `asked_at` (now)."""
    if isinstance(value, datetime):
        instant = _utc(value, field)
        return instant, _after(instant, "")
    if not isinstance(value, str):
        raise InputError(
            f"{field}: {value!r} is a {type(value).__name__}, not a time; give a string ({EXAMPLE})"
        )
    raw = value.strip()
    if NUMBER_RE.match(raw) and not re.fullmatch(r"\d{4}", raw):
        raise InputError(
            f"{field}: {value!r} is a number, not a time: {TIME_HINT} (numbers "
            "are not read as Unix seconds)"
        )
    if m := _DATE_ONLY.fullmatch(raw):
        try:
            start = datetime(int(m[1]), int(m[2] or 1), int(m[3] or 1), tzinfo=UTC)
        except ValueError as exc:
            raise InputError(f"{field}: {value!r} is not a date ({exc}); {EXAMPLE}") from None
        return start, _after(start, "day" if m[3] else "month" if m[2] else "year")
    if (t := _iso(raw, field)) is not None:
        return t, _after(t, "")
    ref = _utc(asked_at, "asked_at") if asked_at is not None else _now()
    if raw and (period := _words(raw, ref)) is not None:
        return period
    raise InputError(f"{field}: {value!r} is not a time kg can read; {EXAMPLE}")


def parse_time(
    value: str | datetime, *, asked_at: datetime | None = None, field: str = "time"
) -> datetime:
    """`value` as an aware UTC datetime: an instant as given, a date, month, year or time word
    as the start of its period ('last year' said in 2025 is 2024-01-01T00:00Z)."""
    return parse_period(value, asked_at=asked_at, field=field)[0]


def _parsed(value: object, info: ValidationInfo) -> object:
    """pydantic's step before AwareDatetime: strings and datetimes through `parse_time` (a
    year is a year, a naive datetime is refused by name), numbers refused (pydantic would
    read them as Unix seconds)."""
    if isinstance(value, str | datetime):
        return parse_time(value, field=info.field_name or "time")
    return no_number_times(value)


# A model field that reads a time the way every surface does; stored in UTC.
TimeInput = Annotated[AwareDatetime, BeforeValidator(_parsed), AfterValidator(to_utc)]
