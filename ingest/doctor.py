"""`kg doctor --llm URL`: is this endpoint's output usable for extraction?

A short self-test on kg's real extraction path (the model's prompt profile, the reply format
the server accepts, validation, vetting): a few made-up conversation turns, each with the
facts a reader would take from it. Reported: the share of valid replies, the facts proposed
and kept, the kept facts that name what the turn said, and seconds a call. Nothing is
written anywhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from kg.ingest.alignment import fold, words
from kg.ingest.extraction import Drops, Guards, extract, vet
from kg.ingest.llm import LLMError, StructuredLLM
from kg.ingest.profiles import profile_for
from kg.schemas.episode import Episode, EpisodeSource, StructuredFact
from kg.schemas.ontology import DEFAULT_ONTOLOGY

# (turn, [(subject, words the fact must name)]): made up for this test.
TURNS: tuple[tuple[str, tuple[tuple[str, frozenset[str]], ...]], ...] = (
    (
        "Priya: I started a new job at the city library last week.",
        (("Priya", frozenset({"library"})),),
    ),
    ("Tom: My sister Jane moved to Denver in March.", (("Jane", frozenset({"denver"})),)),
    ("Priya: Hi Tom! How are you doing?", ()),
    (
        "Tom: I adopted a puppy named Biscuit, and I run every morning before work.",
        (("Tom", frozenset({"biscuit", "puppy"})), ("Tom", frozenset({"run", "running"}))),
    ),
    (
        "Priya: I have been learning to play the cello since 2020.",
        (("Priya", frozenset({"cello"})),),
    ),
)
WHEN = datetime(2024, 5, 1, 12, tzinfo=UTC)


class DoctorReport(BaseModel):
    model: str
    profile: str
    json_mode: str | None = Field(description="The reply format the server accepted.")
    turns: int
    calls: int
    valid_replies: int
    failed_turns: int = Field(description="Turns whose reply never validated.")
    facts_proposed: int
    facts_kept: int
    facts_expected: int
    facts_found: int = Field(description="Expected facts among the kept ones.")
    dropped: dict[str, int]
    seconds_per_call: float
    errors: list[str]

    @property
    def valid_rate(self) -> float:
        return self.valid_replies / self.calls if self.calls else 0.0

    @property
    def usable(self) -> bool:
        """Half the replies valid, and some fact a reader would take from the turns kept."""
        return self.valid_rate >= 0.5 and self.facts_found > 0

    @property
    def verdict(self) -> str:
        if not self.calls:
            return "unusable: no reply from the endpoint"
        if self.valid_rate < 0.5:
            return (
                f"unusable: only {self.valid_rate:.0%} of the replies were valid JSON of the schema"
            )
        if self.facts_found == 0:
            return "unusable: its replies kept no fact the test turns state"
        return (
            f"usable: {self.facts_found} of {self.facts_expected} expected facts kept, "
            f"{self.facts_kept - self.facts_found} other facts kept"
        )


def _found(kept: list[StructuredFact], subject: str, needed: frozenset[str]) -> bool:
    for f in kept:
        said = {w for w, _, _ in words(f"{f.object} {f.fact}")}
        if fold(subject) in {fold(f.subject), fold(f.object)} and said & needed:
            return True
    return False


async def diagnose(
    llm: StructuredLLM,
    *,
    turns: int = len(TURNS),
    guards: Guards | None = None,
    on_turn: Callable[[int], None] | None = None,
) -> DoctorReport:
    """Run the first `turns` test turns through extraction and vetting; never raises on a
    bad reply (that is what it reports), only when the endpoint cannot be reached at all."""
    calls = valid = failed = proposed = kept_n = expected = found = 0
    seconds = 0.0
    dropped = Drops()
    errors: list[str] = []
    for i, (text, facts) in enumerate(TURNS[:turns]):
        episode = Episode(source=EpisodeSource.message, content=text, reference_time=WHEN)
        expected += len(facts)
        t0 = time.perf_counter()
        try:
            extraction, spent = await extract(llm, episode, DEFAULT_ONTOLOGY)
        except LLMError as exc:
            spent = list(getattr(exc, "calls", []))
            if not spent:
                raise  # unreachable, or every reply format refused: nothing to measure
            failed += 1
            errors.append(str(exc)[:300])
        else:
            kept, drops, _ = vet(extraction, episode, DEFAULT_ONTOLOGY, guards or Guards())
            proposed += len(extraction.facts)
            kept_n += len(kept)
            found += sum(_found(kept, s, w) for s, w in facts)
            for name, n in drops.model_dump().items():
                setattr(dropped, name, getattr(dropped, name) + n)
        seconds += time.perf_counter() - t0
        calls += len(spent)
        valid += sum(c.valid for c in spent)
        if on_turn is not None:
            on_turn(i)
    return DoctorReport(
        model=llm.model,
        profile=profile_for(llm.model, llm.prompt_profile).name,
        json_mode=getattr(llm, "json_mode", None),
        turns=min(turns, len(TURNS)),
        calls=calls,
        valid_replies=valid,
        failed_turns=failed,
        facts_proposed=proposed,
        facts_kept=kept_n,
        facts_expected=expected,
        facts_found=found,
        dropped={k: v for k, v in dropped.model_dump().items() if v},
        seconds_per_call=round(seconds / calls, 2) if calls else 0.0,
        errors=errors,
    )
