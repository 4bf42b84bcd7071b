"""A worker process for the crash test: `python -m tests.crash_worker URI LOG GROUP...`.

Runs `kg.queue.Worker` with the rule-based scripted LLM (tests.queue_llm), which logs each
completed extraction call to LOG, until SIGTERM (graceful stop) or SIGKILL (the test's)."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from kg import KG
from kg.queue import Worker
from tests.queue_llm import RuleLLM


async def main(uri: str, log: Path, groups: list[str]) -> None:
    kg = await KG.open(uri, llm=RuleLLM(delay=0.05, log=log, max_concurrency=8))
    worker = Worker(kg, groups=groups, lease_seconds=2.0, poll_seconds=0.05)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, lambda: asyncio.ensure_future(worker.stop()))
    try:
        await worker.run()
    finally:
        await kg.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:]))
