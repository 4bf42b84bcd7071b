"""Time helpers: UTC everywhere, a monotonic transaction clock, and parsing of user input."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from kg.errors import InputError

_DATE_ONLY = re.compile(r"[0-9]{4}(-[0-9]{2}(-[0-9]{2})?)?")  # fullmatch


def utcnow() -> datetime:
    return datetime.now(UTC)


class TransactionClock:
    """Strictly increasing UTC timestamps, so every write has its own transaction time.

    Two plans stamped with the same microsecond would make "as known at T" ambiguous between
    them; bumping by one microsecond keeps transaction time a total order within a process.
    """

    def __init__(self) -> None:
        self._last: datetime | None = None

    def advance_past(self, t: datetime | None) -> None:
        """Make every later `now()` come after `t`: another process's latest write to the
        group, so transaction time stays a total order across writers (kg.versioned)."""
        if t is not None and (self._last is None or t > self._last):
            self._last = t

    def now(self) -> datetime:
        t = utcnow()
        if self._last is not None and t <= self._last:
            t = self._last + timedelta(microseconds=1)
        self._last = t
        return t


def parse_time(text: str, *, field: str = "time") -> datetime:
    """ISO-8601 with an offset ('2024-03-01T12:00:00+09:00', '...Z'), or a bare date or year-month.

    A bare date has no time of day to be ambiguous about and is taken as UTC midnight; a time
    of day without an offset is refused, since kg cannot know which zone it meant. So is a
    time outside years 1 to 9999 once converted to UTC (0001-01-01T00:00+01:00 is in year 0).
    """
    raw = text.strip()
    example = "(e.g. 2024-03-01 or 2024-03-01T09:00:00Z)"
    if _DATE_ONLY.fullmatch(raw):
        parts = [int(p) for p in raw.split("-")] + [1, 1]
        try:
            return datetime(parts[0], parts[1], parts[2], tzinfo=UTC)
        except ValueError as exc:
            raise InputError(f"{field}: {text!r} is not a date ({exc}) {example}") from None
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InputError(f"{field}: {text!r} is not an ISO-8601 time {example}") from None
    if value.tzinfo is None:
        raise InputError(
            f"{field}: {text!r} has no timezone; add 'Z' or an offset such as '+09:00'"
        )
    return utc(value, field=field)


def utc(value: datetime, *, field: str = "time") -> datetime:
    """An aware datetime in UTC, or an InputError: naive, or outside years 1-9999 in UTC."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InputError(f"{field}: naive datetime; give it a timezone")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InputError(
            f"{field}: {value.isoformat()} is outside years 1 to 9999 once converted to UTC"
        ) from None
