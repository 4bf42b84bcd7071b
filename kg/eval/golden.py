"""The golden-set format of `kg eval`: JSON Lines, one record a line, told apart by `kind`.

- `meta` (optional, at most one): the set's name, licence and the ontology its facts use
  (which predicates are single-valued, so a new value supersedes the old).
- `haystack`: sessions of dated turns. A turn may carry the structured facts it states, so a
  set can be ingested without an LLM; the turns are the evidence items point at.
- `item`: one question, asked at `asked_at`, against one haystack (by id) or against
  sessions of its own; its evidence turns, the `supersedes` links among them, the gold
  answers and the `stale_answers` (values that were true once and are not at `asked_at`).

See docs/eval.md for an example of each record and how every metric is computed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from kg.errors import InputError, validation_message
from kg.schemas.episode import Channel, EpisodeSource, StructuredFact
from kg.schemas.ontology import Ontology
from kg.schemas.validation import UtcDatetime


class ItemType(StrEnum):
    single = "single"  # one evidence turn
    multi = "multi"  # several evidence turns, combined
    temporal = "temporal"  # about a time, or asked of a time ("in 2019")
    knowledge_update = "knowledge_update"  # the value changed: only the latest is current
    abstain = "abstain"  # never said: the right context is none
    tool_result = "tool_result"  # the evidence came from a tool's output


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Turn(_Strict):
    id: str = Field(min_length=1, description="Unique in its haystack, e.g. 'S3:7'.")
    at: UtcDatetime = Field(description="When it was said: the episode's reference time.")
    text: str = Field(min_length=1)
    speaker: str | None = None
    channel: Channel = Channel.user
    source: Literal["message", "text", "json"] = "message"
    facts: list[StructuredFact] = Field(
        default_factory=list, description="What the turn states, for structured ingestion."
    )

    @property
    def content(self) -> str:
        return f"{self.speaker}: {self.text}" if self.speaker else self.text

    @property
    def episode_source(self) -> EpisodeSource:
        return EpisodeSource(self.source)


class Session(_Strict):
    id: str = Field(min_length=1)
    turns: list[Turn] = Field(min_length=1)


class Meta(_Strict):
    kind: Literal["meta"] = "meta"
    name: str = "golden set"
    license: str = ""
    ontology: Ontology | None = Field(
        default=None, description="The ontology the facts use (default: kg's default)."
    )


class Haystack(_Strict):
    kind: Literal["haystack"] = "haystack"
    id: str = Field(min_length=1)
    sessions: list[Session] = Field(min_length=1)

    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]


class Supersedes(_Strict):
    turn: str = Field(description="The turn that states the new value.")
    old: str = Field(description="The turn whose value it replaced.")


class Item(_Strict):
    kind: Literal["item"] = "item"
    id: str = Field(min_length=1)
    type: ItemType
    question: str = Field(min_length=1)
    asked_at: UtcDatetime
    haystack: str | None = Field(default=None, description="A haystack record's id.")
    sessions: list[Session] = Field(
        default_factory=list, description="The item's own haystack, when it names none."
    )
    evidence: list[str] = Field(default_factory=list, description="Turn ids (none: abstain).")
    supersedes: list[Supersedes] = Field(default_factory=list)
    answers: list[str] = Field(default_factory=list, description="Gold answers (any one).")
    stale_answers: list[str] = Field(
        default_factory=list, description="Values once true and no longer at asked_at."
    )
    subject: str | None = Field(
        default=None,
        description="Who or what the question is about. When given, a stale answer counts "
        "only in a line that names it too: another subject's current value is not stale.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.haystack is None) == (not self.sessions):
            raise ValueError("an item names a haystack or carries its own sessions (not both)")
        if self.type is ItemType.abstain:
            if self.evidence or self.answers:
                raise ValueError("an abstain item has no evidence and no answers")
        elif not self.answers:
            raise ValueError(f"a {self.type.value} item needs gold answers")
        if self.type is ItemType.knowledge_update and not self.stale_answers:
            raise ValueError("a knowledge_update item needs stale_answers")
        return self

    @property
    def group(self) -> str:
        return self.haystack or self.id


Record = Annotated[Meta | Haystack | Item, Field(discriminator="kind")]
_RECORD: TypeAdapter[Meta | Haystack | Item] = TypeAdapter(Record)


class GoldenSet(BaseModel):
    meta: Meta = Field(default_factory=Meta)
    haystacks: dict[str, Haystack] = Field(default_factory=dict)
    items: list[Item] = Field(default_factory=list)

    def haystack_of(self, item: Item) -> list[Turn]:
        if item.haystack is not None:
            return self.haystacks[item.haystack].turns()
        return [t for s in item.sessions for t in s.turns]

    def check(self) -> Self:
        """References resolve: haystacks exist, turn ids are unique, evidence points at turns."""
        for item in self.items:
            if item.haystack is not None and item.haystack not in self.haystacks:
                raise InputError(f"item {item.id!r}: no haystack {item.haystack!r}")
            ids = [t.id for t in self.haystack_of(item)]
            if len(ids) != len(set(ids)):
                dupes = sorted({i for i in ids if ids.count(i) > 1})[:3]
                raise InputError(f"item {item.id!r}: turn ids repeat in its haystack: {dupes}")
            known = set(ids)
            refs = [*item.evidence, *(x for s in item.supersedes for x in (s.turn, s.old))]
            missing = [r for r in refs if r not in known]
            if missing:
                raise InputError(f"item {item.id!r}: no turn {missing[0]!r} in its haystack")
        return self

    def records(self) -> Iterable[BaseModel]:
        yield self.meta
        yield from self.haystacks.values()
        yield from self.items

    def dumps(self) -> str:
        return "".join(
            r.model_dump_json(exclude_defaults=False, exclude_none=True) + "\n"
            for r in self.records()
        )


def parse_lines(lines: Iterable[str], where: str = "golden set") -> GoldenSet:
    out = GoldenSet()
    seen_meta = False
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw: Any = json.loads(line)
            record = _RECORD.validate_python(raw)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}:{n}: not JSON: {exc.msg}") from None
        except ValidationError as exc:
            raise InputError(f"{where}:{n}: {validation_message(exc)}") from None
        if isinstance(record, Meta):
            if seen_meta:
                raise InputError(f"{where}:{n}: a second meta record")
            out.meta, seen_meta = record, True
        elif isinstance(record, Haystack):
            if record.id in out.haystacks:
                raise InputError(f"{where}:{n}: haystack {record.id!r} defined twice")
            out.haystacks[record.id] = record
        else:
            out.items.append(record)
    ids = [i.id for i in out.items]
    if len(ids) != len(set(ids)):
        raise InputError(
            f"{where}: item ids repeat: {sorted({i for i in ids if ids.count(i) > 1})[:3]}"
        )
    return out.check()


def load(path: str | Path) -> GoldenSet:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"golden set {p}: {exc.strerror}") from None
    return parse_lines(text.splitlines(), where=str(p))
