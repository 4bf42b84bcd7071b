"""Times and validity intervals as people read them: all UTC, midnight as a bare date.

One formatter for the CLI's tables and the prompt block of `render_context`; each picks how a
time of day is spelled (the CLI to the second, the prompt block shorter, to the minute).
"""

from __future__ import annotations

from datetime import datetime

SECONDS = " %H:%M:%S"
MINUTES = "T%H:%MZ"


def day(d: datetime | None, *, time_format: str = SECONDS) -> str:
    """'now' for an open end; a bare date at midnight, else the date and `time_format`."""
    if d is None:
        return "now"
    if d.time() == datetime.min.time():
        return d.strftime("%Y-%m-%d")
    return d.strftime("%Y-%m-%d" + time_format)


def interval(start: datetime, end: datetime | None, *, time_format: str = SECONDS) -> str:
    return f"{day(start, time_format=time_format)} → {day(end, time_format=time_format)}"
