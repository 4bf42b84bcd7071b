"""A writer in a process of its own, for tests/test_placement.py: opens the deployment
`argv[1]` (KG_STORES) sharing the test's embedded servers, writes one new fact an episode
(subject `proc{i}`) to group `argv[2]` until its stdin closes, and prints the index of each
write acknowledged."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime

from kg import KG


async def main(stores: str, group: str) -> None:
    loop = asyncio.get_running_loop()
    closed = loop.run_in_executor(None, sys.stdin.read)  # returns when the test closes it
    async with await KG.open(stores=stores, group_id=group, attach=True) as kg:
        i = 0
        while not closed.done():
            facts = [{"subject": f"proc{i}", "predicate": "LIVES_IN", "object": f"town{i}"}]
            ref = datetime(2025, 1, 1, tzinfo=UTC)
            await kg.add_episode(source="facts", reference_time=ref, facts=facts)
            print(i, flush=True)
            i += 1


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
