"""Time helpers: UTC everywhere, a monotonic transaction clock, and parsing of user input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kg.errors import InputError
from kg.schemas.timeparse import parse_time

__all__ = ["TransactionClock", "parse_time", "utc", "utcnow"]


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
