"""Prompt profiles: how the extraction call is asked, chosen by the model's name.

A frontier model reads kg's full rules, the ontology and earlier episodes and answers with
entities and facts. A 135M-270M model given the same prompt spends its tokens echoing the
schema, or loops until the token cap. The `small` profile asks less, in fewer tokens: short
rules, a compact reply (facts only, quote first, at most three, strings capped in the
grammar), two worked examples as chat turns, and no earlier episodes. What comes back is
vetted exactly like any other reply (kg.ingest.extraction.vet).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from pydantic import BaseModel

from kg.schemas.extraction import CompactExtraction, Extraction
from kg.schemas.ontology import Ontology

Message = dict[str, str]


@dataclass(frozen=True)
class Profile:
    name: str
    pattern: str = field(metadata={"doc": "Regex searched in the model name, case-insensitive."})
    schema: type[BaseModel] = Extraction
    context: bool = True  # send earlier episodes
    examples: tuple[tuple[str, str], ...] = ()  # (episode text, reply) as chat turns

    def matches(self, model: str) -> bool:
        return bool(self.pattern) and re.search(self.pattern, model, re.I) is not None


def _reply(*facts: tuple[str, str, str, str, str, str | None]) -> str:
    keys = ("quote", "subject", "predicate", "object", "fact", "valid_at")
    return json.dumps({"facts": [dict(zip(keys, f, strict=True)) for f in facts]})


SMALL_RULES = (
    "List the facts the episode states about people. For each fact give:\n"
    "quote: words copied exactly from the episode;\n"
    "subject: a name (the speaker, for I and my);\n"
    "predicate: {predicates};\n"
    "object: a short noun phrase; fact: one short sentence about the subject;\n"
    "valid_at: time words from the episode, or null.\n"
    "Greetings, questions and thanks state no facts. Reply with JSON only."
)
SMALL_PREDICATES = "UPPER_SNAKE_CASE, e.g. LIKES, DID, HAS, PLANS, VISITED, LIVES_IN"
SMALL_EXAMPLES = (  # the one with facts last: a base model repeats the last pattern it saw
    ("Ben: Hey Anna! How have you been?", _reply()),
    (
        "Anna: I just adopted a puppy named Max, and I'm learning to play the piano this year!",
        _reply(
            (
                "I just adopted a puppy named Max",
                "Anna",
                "ADOPTED",
                "puppy Max",
                "Anna adopted a puppy named Max.",
                None,
            ),
            (
                "I'm learning to play the piano this year",
                "Anna",
                "LEARNS",
                "piano",
                "Anna is learning to play the piano.",
                "this year",
            ),
        ),
    ),
)
DEFAULT = Profile("default", "")
SMALL = Profile(
    "small",
    r"smol|gemma-?3-?(270m|1b)|\b(135|270|360)m\b|-0\.5b|tinyllama",
    schema=CompactExtraction,
    context=False,
    examples=SMALL_EXAMPLES,
)
PROFILES = (SMALL,)
BY_NAME = {p.name: p for p in (DEFAULT, *PROFILES)}


def profile_for(model: str, name: str | None = None) -> Profile:
    """The named profile, else the first whose pattern the model name matches, else default."""
    if name is not None:
        try:
            return BY_NAME[name]
        except KeyError:
            raise ValueError(
                f"unknown prompt profile {name!r} (known: {', '.join(BY_NAME)})"
            ) from None
    return next((p for p in PROFILES if p.matches(model)), DEFAULT)


def small_messages(content: str, profile: Profile, ontology: Ontology) -> list[Message]:
    """Short rules, the worked examples as earlier turns, then the episode. A strict
    ontology's predicates are named (a lenient one's are any name, as in the examples)."""
    names = ", ".join(p.name for p in ontology.predicates)
    predicates = f"one of {names}" if ontology.strict and names else SMALL_PREDICATES
    messages: list[Message] = [
        {"role": "system", "content": SMALL_RULES.format(predicates=predicates)}
    ]
    for text, reply in profile.examples:
        messages += [
            {"role": "user", "content": f"EPISODE:\n{text}"},
            {"role": "assistant", "content": reply},
        ]
    return [*messages, {"role": "user", "content": f"EPISODE:\n{content}"}]


def as_extraction(reply: BaseModel) -> Extraction:
    if isinstance(reply, Extraction):
        return reply
    if isinstance(reply, CompactExtraction):
        return reply.full()
    raise TypeError(f"no extraction in a {type(reply).__name__}")
