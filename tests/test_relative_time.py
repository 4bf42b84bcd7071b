"""Relative time words resolve against the episode's reference time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kg.ingest.relative_time import resolve_time

REF = datetime(2024, 6, 12, 15, 30, tzinfo=UTC)  # a Wednesday


def d(y: int, m: int, day: int) -> datetime:
    return datetime(y, m, day, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2 weeks ago", d(2024, 5, 29)),
        ("two weeks ago", d(2024, 5, 29)),
        ("a week ago", d(2024, 6, 5)),
        ("3 days ago", d(2024, 6, 9)),
        ("a couple of days ago", d(2024, 6, 10)),
        ("6 months ago", d(2023, 12, 12)),
        ("a year ago", d(2023, 6, 12)),
        ("yesterday", d(2024, 6, 11)),
        ("today", d(2024, 6, 12)),
        ("tomorrow", d(2024, 6, 13)),
        ("in 3 days", d(2024, 6, 15)),
        ("last week", d(2024, 6, 3)),
        ("next week", d(2024, 6, 17)),
        ("this month", d(2024, 6, 1)),
        ("last month", d(2024, 5, 1)),
        ("last year", d(2023, 1, 1)),
        ("next Tuesday", d(2024, 6, 18)),
        ("last Tuesday", d(2024, 6, 11)),
        ("Monday", d(2024, 6, 10)),
        ("last Wednesday", d(2024, 6, 5)),
        ("next Wednesday", d(2024, 6, 19)),
        ("last March", d(2024, 3, 1)),
        ("last June", d(2023, 6, 1)),
        ("next March", d(2025, 3, 1)),
        ("March", d(2024, 3, 1)),
        ("September", d(2023, 9, 1)),
        ("this September", d(2024, 9, 1)),
        ("March 2019", d(2019, 3, 1)),
        ("since 2019", d(2019, 1, 1)),
        ("2021-03-02", d(2021, 3, 2)),
        ("2021-03-02T09:00:00+09:00", datetime(2021, 3, 2, 0, 0, tzinfo=UTC)),
        ("  Last   Week. ", d(2024, 6, 3)),
    ],
)
def test_resolves(text: str, expected: datetime) -> None:
    assert resolve_time(text, REF) == expected


@pytest.mark.parametrize("text", [None, "", "when I was young", "someday", "13 moons ago"])
def test_unrecognised_is_none(text: str | None) -> None:
    assert resolve_time(text, REF) is None
