"""A scripted LLM for the queue tests and the crash test: it reads the episode and answers
as a perfect extractor would, whatever order and concurrency it is called in.

Episodes are lines like "Minji: I live in Busan." (`statement`). `RuleLLM` extracts the fact
from the text, answers resolution calls with "nothing to merge", can sleep to make calls
overlap, records the most calls it saw in flight, and can append one line per completed
extraction to a log file shared by processes (the crash test counts them per episode).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kg.ingest.llm import Message, StructuredLLM

PEOPLE = ("Minji", "Jun", "Ara", "Bo")
CITIES = ("Seoul", "Busan", "Daegu", "Incheon", "Jeju")
ORGS = ("Naver", "Kakao", "Samsung", "Coupang")
HOBBIES = ("jazz", "hiking", "chess", "baking")
_LINE = re.compile(
    r"^(\w+(?: \w+)?): I (live in|work at|like|moved to) (\w+)(?: (\d+) weeks ago)?\.$"
)
_PRED = {"live in": "LIVES_IN", "moved to": "LIVES_IN", "work at": "WORKS_AT", "like": "LIKES"}


def statement(rng: random.Random) -> str:
    who = rng.choice(PEOPLE)
    kind = rng.random()
    if kind < 0.35:
        return f"{who}: I live in {rng.choice(CITIES)}."
    if kind < 0.5:
        return f"{who}: I moved to {rng.choice(CITIES)} {rng.randint(1, 3)} weeks ago."
    if kind < 0.8:
        return f"{who}: I work at {rng.choice(ORGS)}."
    return f"{who}: I like {rng.choice(HOBBIES)}."


def conversation(n: int, seed: int = 7, start: datetime | None = None) -> list[dict[str, Any]]:
    """`n` message episodes a day apart (some on the same day, to test ties), as add_episode
    keyword arguments."""
    rng = random.Random(seed)
    t = start or datetime(2023, 1, 1, tzinfo=UTC)
    out = []
    for _ in range(n):
        t += timedelta(days=rng.choice((0, 1, 1, 2, 5)))
        out.append({"source": "message", "content": statement(rng), "reference_time": t})
    return out


def extract_reply(text: str) -> str:
    facts = []
    for line in text.strip().splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        who, verb, obj, weeks = m.groups()
        quote = line.split(": ", 1)[1].rstrip(".")
        facts.append(
            {
                "subject": "I",
                "predicate": _PRED[verb],
                "object": obj,
                "fact": f"{who} {verb} {obj}",
                "quote": quote,
                "valid_at": f"{weeks} weeks ago" if weeks else None,
                "invalid_at": None,
            }
        )
    return json.dumps({"entities": [{"name": "I", "type": "Person"}], "facts": facts})


class RuleLLM(StructuredLLM):
    """Extraction by rule (see the module docstring); `fail` maps an episode's text to how
    many of its extraction calls should fail with an unavailable endpoint first."""

    def __init__(
        self,
        *,
        delay: float = 0.0,
        log: Path | None = None,
        max_concurrency: int = 8,
        fail: dict[str, int] | None = None,
        invalid: frozenset[str] = frozenset(),
    ) -> None:
        self.model = "rules"
        self.max_concurrency = max_concurrency
        self.delay = delay
        self.log = log
        self.fail = dict(fail or {})
        self.invalid = invalid
        self.in_flight = 0
        self.max_in_flight = 0
        self.calls: dict[str, int] = {}

    async def _complete(
        self, messages: list[Message], schema: type[BaseModel], name: str
    ) -> tuple[str, int, int]:
        from kg.ingest.llm import LLMUnavailableError

        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay:  # jittered: calls finish out of the order they started in
                await asyncio.sleep(self.delay * random.uniform(0.2, 2.0))
            if name != "Extraction":  # resolution: nothing to merge
                return json.dumps({"entities": [], "facts": []}), 10, 5
            episode = messages[1]["content"].split("EPISODE:\n", 1)[1]
            self.calls[episode] = self.calls.get(episode, 0) + 1
            if self.fail.get(episode, 0) > 0:
                self.fail[episode] -= 1
                raise LLMUnavailableError("scripted outage")
            reply = "not json" if episode in self.invalid else extract_reply(episode)
            if self.log is not None:
                when = messages[1]["content"].split("\n", 1)[0].rsplit(": ", 1)[-1]
                line = json.dumps({"episode": episode, "at": when, "pid": os.getpid()}) + "\n"
                fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line.encode())  # one write: whole lines across processes
                finally:
                    os.close(fd)
            return reply, 100, 50
        finally:
            self.in_flight -= 1
