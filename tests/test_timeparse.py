"""The one time parser (kg.schemas.timeparse): what every surface reads a time with."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import BaseModel, ValidationError

from kg.errors import InputError
from kg.schemas.timeparse import TimeInput, parse_period, parse_time

ASKED = datetime(2025, 6, 15, 12, 30, tzinfo=UTC)


def d(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("2021", d(2021, 1, 1), d(2022, 1, 1)),
        ("2021-03", d(2021, 3, 1), d(2021, 4, 1)),
        ("2021-12", d(2021, 12, 1), d(2022, 1, 1)),
        ("2020-02-29", d(2020, 2, 29), d(2020, 3, 1)),
        ("last year", d(2024, 1, 1), d(2025, 1, 1)),
        (" Last  Year ", d(2024, 1, 1), d(2025, 1, 1)),
        ("March 2021", d(2021, 3, 1), d(2021, 4, 1)),
        ("last March", d(2025, 3, 1), d(2025, 4, 1)),
        ("yesterday", d(2025, 6, 14), d(2025, 6, 15)),
        ("3 weeks ago", d(2025, 5, 25), d(2025, 6, 1)),
        ("작년", d(2024, 1, 1), d(2025, 1, 1)),
        ("9999", d(9999, 1, 1), datetime.max.replace(tzinfo=UTC)),
    ],
)
def test_periods(text: str, start: datetime, end: datetime) -> None:
    assert parse_period(text, asked_at=ASKED) == (start, end)
    assert parse_time(text, asked_at=ASKED) == start


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2021-03-04T09:00:00Z", d(2021, 3, 4, 9)),
        ("2021-03-04T09:00:00z", d(2021, 3, 4, 9)),
        ("2021-03-04T09:00:00+09:00", d(2021, 3, 4, 0)),
        ("2021-03-04T09:00:00", d(2021, 3, 4, 9)),  # no offset: UTC
        ("2021-03-04 09:00", d(2021, 3, 4, 9)),
        ("now", ASKED),
    ],
)
def test_instants(text: str, expected: datetime) -> None:
    got = parse_time(text, asked_at=ASKED)
    assert got == expected and got.tzinfo is UTC


def test_datetimes_pass_through_in_utc_and_naive_ones_are_refused() -> None:
    seoul = timezone(timedelta(hours=9))
    assert parse_time(datetime(2021, 1, 1, 9, tzinfo=seoul)) == d(2021, 1, 1)
    with pytest.raises(InputError, match="valid_at: naive datetime"):
        parse_time(datetime(2021, 1, 1), field="valid_at")


def test_words_default_to_now() -> None:
    assert parse_time("last year").year == datetime.now(UTC).year - 1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("blah", "valid_at: 'blah' is not a time kg can read; e.g. 2024-03-01"),
        ("", "is not a time kg can read"),
        ("last", "is not a time kg can read"),
        ("2021-02-30", "valid_at: '2021-02-30' is not a date"),
        ("2021-13", "is not a date"),
        (2021, "valid_at: 2021 is a int, not a time"),
    ],
)
def test_unreadable_is_an_input_error_naming_the_field(value: object, message: str) -> None:
    with pytest.raises(InputError, match=message) as info:
        parse_time(value, field="valid_at")  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_out_of_range_after_conversion() -> None:
    with pytest.raises(InputError, match="outside years 1 to 9999"):
        parse_time("0001-01-01T00:00:00+01:00")


class _Model(BaseModel):
    reference_time: TimeInput


def test_model_field_reads_like_every_surface() -> None:
    assert _Model(reference_time="2020-01-01").reference_time == d(2020, 1, 1)  # type: ignore[arg-type]
    assert _Model(reference_time="2020").reference_time == d(2020, 1, 1)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="reference_time: 'soon' is not a time"):
        _Model(reference_time="soon")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="is a number, not a time"):
        _Model(reference_time=1700000000)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        _Model(reference_time=datetime(2020, 1, 1))
