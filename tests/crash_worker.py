"""A worker process for the crash test: `python -m tests.crash_worker URI LOG GROUP...`.

Runs `kg.queue.Worker` with the rule-based scripted LLM (tests.queue_llm), which logs each
completed extraction call to LOG, until SIGTERM (graceful stop) or SIGKILL (the test's). A file
ready-PID beside LOG says SIGTERM is handled (a worker still importing would just die)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from kg import KG
from kg.queue import Worker
from tests.queue_llm import RuleLLM


async def main(uri: str, log: Path, groups: list[str]) -> None:
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    (log.parent / f"ready-{os.getpid()}").touch()  # from here on SIGTERM is a graceful stop
    kg = await KG.open(uri, llm=RuleLLM(delay=0.05, log=log, max_concurrency=8))
    worker = Worker(kg, groups=groups, lease_seconds=2.0, poll_seconds=0.05)
    try:
        running = asyncio.create_task(worker.run())
        stop = asyncio.create_task(stopping.wait())
        await asyncio.wait({running, stop}, return_when=asyncio.FIRST_COMPLETED)
        await worker.stop()
        await running  # its error, if it failed
        stop.cancel()
    finally:
        await kg.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:]))
