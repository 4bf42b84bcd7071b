"""Properties of the timeline logic on the real store, over random episode sequences."""

from __future__ import annotations

import itertools
import os
from datetime import datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kg import KG
from tests.conftest import add, fact, t

_counter = itertools.count()
YEARS = st.integers(min_value=2000, max_value=2030)
CITIES = st.sampled_from(["Seoul", "Busan", "Daegu", "Incheon"])
# Mid-year probes around every year the strategies can produce, plus both ends.
PROBES = [t(y, 7) for y in range(1999, 2032)]

# CI runs 25 sequences per property; KG_THOROUGH=1 explores 300.
SETTINGS = settings(
    max_examples=300 if os.environ.get("KG_THOROUGH") else 25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def step_function(values: list[tuple[int, str]], at: datetime) -> list[str]:
    """Oracle: a single-valued fact at V is the value with the latest start not after V."""
    started = [(y, city) for y, city in values if t(y) <= at]
    return [max(started)[1]] if started else []


async def current_view(kg: KG, group: str, known_at: datetime | None = None) -> list[list[str]]:
    out = []
    for at in PROBES:
        facts = await kg.facts(
            group_id=group, subject="Alice", predicate="LIVES_IN", valid_at=at, known_at=known_at
        )
        out.append(sorted(f.object for f in facts))
    return out


@SETTINGS
@given(
    timeline=st.lists(st.tuples(YEARS, CITIES), min_size=1, max_size=6, unique_by=lambda x: x[0]),
    order=st.randoms(use_true_random=False),
)
async def test_arrival_order_does_not_change_the_timeline(
    kg: KG, timeline: list[tuple[int, str]], order: object
) -> None:
    group = f"p{next(_counter)}"
    arrivals = list(timeline)
    order.shuffle(arrivals)  # type: ignore[attr-defined]
    for i, (year, city) in enumerate(arrivals):
        await add(
            kg,
            t(2040, 1, 1 + i),
            fact("Alice", "LIVES_IN", city, t(year).isoformat()),
            group_id=group,
        )
    view = await current_view(kg, group)
    assert view == [step_function(timeline, at) for at in PROBES]
    # Single-valued: never two active values at one valid time.
    assert all(len(v) <= 1 for v in view)


@SETTINGS
@given(
    episodes=st.lists(
        st.tuples(YEARS, CITIES, st.sampled_from(["user", "tool", "document"])),
        min_size=1,
        max_size=6,
    )
)
async def test_known_at_replays_every_past_state(
    kg: KG, episodes: list[tuple[int, str, str]]
) -> None:
    """Whatever the episodes did, asking 'as known at T' returns what was answered at T."""
    group = f"r{next(_counter)}"
    snapshots: list[tuple[datetime, list[list[str]]]] = []
    for i, (year, city, channel) in enumerate(episodes):
        await add(
            kg,
            t(2040, 1, 1 + i),
            fact("Alice", "LIVES_IN", city, t(year).isoformat()),
            group_id=group,
            channel=channel,
        )
        mark = kg.clock.now()
        snapshots.append((mark, await current_view(kg, group, known_at=mark)))
    for mark, seen in snapshots:
        assert await current_view(kg, group, known_at=mark) == seen
