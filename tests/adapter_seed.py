"""A served group and an embedded store holding the same few facts, for the retrievers'
tests (tests/test_adapter_langchain.py, tests/test_adapter_llamaindex.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from kg import KG
from kg.client import AsyncClient
from tests.served import Served, serve

GROUP = "retrieval"
FACTS = [
    ("Minji", "LIVES_IN", "Busan", 2024),
    ("Minji", "WORKS_AT", "Kakao", 2022),
    ("Minji", "LIKES", "kimchi stew", 2020),
    ("Minji", "STUDIED_AT", "KAIST", 2015),
    ("Joon", "LIVES_IN", "Daegu", 2019),
]


def episodes() -> list[dict[str, object]]:
    return [
        {
            "source": "facts",
            "reference_time": datetime(year, 6, 1, tzinfo=UTC),
            "facts": [{"subject": s, "predicate": p, "object": o}],
        }
        for s, p, o, year in FACTS
    ]


def seeded_server(home: Path) -> Served:
    served = serve(home, [(GROUP, "write", "user")])

    async def seed() -> None:
        async with AsyncClient(served.url, served.key(GROUP, "write")) as client:
            for ep in episodes():
                await client.add_episode(**ep)  # type: ignore[arg-type]

    asyncio.run(seed())
    return served


async def seeded_kg(home: Path) -> KG:
    kg = await KG.open(home=home, embedder=None, group_id=GROUP)
    for ep in episodes():
        await kg.add_episode(**ep)  # type: ignore[arg-type]
    return kg
