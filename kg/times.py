"""Time helpers: UTC everywhere, a monotonic transaction clock, and parsing of user input."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from kg.errors import InputError

_DATE_ONLY = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")


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
    of day without an offset is refused, since kg cannot know which zone it meant.
    """
    raw = text.strip()
    if _DATE_ONLY.match(raw):
        parts = [int(p) for p in raw.split("-")] + [1, 1]
        return datetime(parts[0], parts[1], parts[2], tzinfo=UTC)
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InputError(
            f"{field}: {text!r} is not an ISO-8601 time (e.g. 2024-03-01 or 2024-03-01T09:00:00Z)"
        ) from None
    if value.tzinfo is None:
        raise InputError(
            f"{field}: {text!r} has no timezone; add 'Z' or an offset such as '+09:00'"
        )
    return value.astimezone(UTC)
