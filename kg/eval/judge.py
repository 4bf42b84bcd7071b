"""With an LLM: answer from a context block, then judge the answer against gold and stale.

Two structured calls per item and system (the answer, then the verdict), through the same
`StructuredLLM` kg extracts with, so any OpenAI-compatible endpoint works and the scripted
LLM tests the path offline.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kg.eval.golden import Item, ItemType
from kg.ingest.llm import LLMCall, LLMError, StructuredLLM

Verdict = Literal["correct", "stale", "wrong", "abstained"]
DONT_KNOW = "I don't know"

ANSWER_SYSTEM = (
    "You answer a question using only the memory records given. Records marked 'no longer "
    "true' are history. If the records do not contain the answer, answer exactly "
    f'"{DONT_KNOW}". Reply with JSON: {{"answer": "..."}}, the answer alone, short.'
)
JUDGE_SYSTEM = (
    "You grade an answer to a question. 'correct': it gives one of the gold answers (or an "
    "equivalent). 'stale': it gives one of the outdated answers as the current one. "
    "'abstained': it says it does not know. 'wrong': anything else. Reply with JSON: "
    '{"verdict": "correct" | "stale" | "wrong" | "abstained"}.'
)


class Answer(BaseModel):
    answer: str = Field(max_length=2000)


class Judgement(BaseModel):
    verdict: Verdict


class Judge:
    def __init__(self, llm: StructuredLLM) -> None:
        self.llm = llm
        self.calls = 0
        self.tokens = 0

    async def answer_and_judge(self, item: Item, context: str) -> tuple[str, str]:
        """The model's answer and its verdict; an abstain item is correct when it abstains."""
        when = item.asked_at.strftime("%Y-%m-%d %H:%M UTC")
        try:
            answer, calls = await self.llm.structured(
                [
                    {"role": "system", "content": ANSWER_SYSTEM},
                    {
                        "role": "user",
                        "content": f"{context or '(no records)'}\n\nAsked on {when}. "
                        f"Question: {item.question}",
                    },
                ],
                Answer,
                purpose="eval answer",
            )
            self._count(calls)
            gold = "; ".join(item.answers) or "(none: the question is about something never said)"
            stale = "; ".join(item.stale_answers) or "(none)"
            verdict, calls = await self.llm.structured(
                [
                    {"role": "system", "content": JUDGE_SYSTEM},
                    {
                        "role": "user",
                        "content": f"Question: {item.question}\nGold answers: {gold}\n"
                        f"Outdated answers: {stale}\n"
                        f"Answer to grade: {answer.answer}",
                    },
                ],
                Judgement,
                purpose="eval judge",
            )
            self._count(calls)
        except LLMError as exc:
            return f"(error: {exc})", "wrong"
        v = verdict.verdict
        if item.type is ItemType.abstain:
            v = "correct" if v == "abstained" else "wrong"
        return answer.answer, v

    def _count(self, calls: list[LLMCall]) -> None:
        self.calls += len(calls)
        self.tokens += sum(c.prompt_tokens + c.completion_tokens for c in calls)
