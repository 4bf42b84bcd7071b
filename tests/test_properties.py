"""Properties of the timeline logic over random episode sequences.

Each property runs twice: hundreds of sequences on the in-memory store (`tests.memory_store`:
the same planners and facade, no server) and a few on the real store, which also keeps the
in-memory store honest (see tests/test_memory_store.py).
"""

from __future__ import annotations

import itertools
import os
import random
from datetime import datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from kg import KG
from tests.conftest import add, examples, fact, t

_counter = itertools.count()
EPSILON = timedelta(microseconds=1)
YEARS = st.integers(min_value=2000, max_value=2030)
CITIES = st.sampled_from(["Seoul", "Busan", "Daegu", "Incheon"])
# Both sides of every boundary the strategies can produce (values start on January 1st), so a
# closing off by a microsecond shows; plus both ends.
PROBES = [p for y in range(2000, 2032) for p in (t(y) - EPSILON, t(y))]

THOROUGH = bool(os.environ.get("KG_THOROUGH"))


# In memory: 500 sequences per property (KG_THOROUGH=1: 5000). On the real store: 5 (300).
PURE = examples(5000 if THOROUGH else 500)
LIVE = examples(300 if THOROUGH else 5)


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


TIMELINES = st.lists(st.tuples(YEARS, CITIES), min_size=1, max_size=6, unique_by=lambda x: x[0])


async def arrival_order_does_not_change_the_timeline(
    kg: KG, timeline: list[tuple[int, str]], order: random.Random
) -> None:
    group = f"p{next(_counter)}"
    arrivals = list(timeline)
    order.shuffle(arrivals)
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


@PURE
@given(timeline=TIMELINES, order=st.randoms(use_true_random=False))
async def test_arrival_order_does_not_change_the_timeline(
    mem: KG, timeline: list[tuple[int, str]], order: random.Random
) -> None:
    await arrival_order_does_not_change_the_timeline(mem, timeline, order)


@LIVE
@given(timeline=TIMELINES, order=st.randoms(use_true_random=False))
async def test_arrival_order_does_not_change_the_timeline_live(
    kg: KG, timeline: list[tuple[int, str]], order: random.Random
) -> None:
    await arrival_order_does_not_change_the_timeline(kg, timeline, order)


CHANNEL_EPISODES = st.lists(
    st.tuples(YEARS, CITIES, st.sampled_from(["user", "tool", "document"])),
    min_size=1,
    max_size=6,
)


async def known_at_replays_every_past_state(kg: KG, episodes: list[tuple[int, str, str]]) -> None:
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


@PURE
@given(episodes=CHANNEL_EPISODES)
async def test_known_at_replays_every_past_state(
    mem: KG, episodes: list[tuple[int, str, str]]
) -> None:
    await known_at_replays_every_past_state(mem, episodes)


@LIVE
@given(episodes=CHANNEL_EPISODES)
async def test_known_at_replays_every_past_state_live(
    kg: KG, episodes: list[tuple[int, str, str]]
) -> None:
    await known_at_replays_every_past_state(kg, episodes)
