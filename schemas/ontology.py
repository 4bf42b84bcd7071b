"""What an application declares about its world: entity types and predicates.

A predicate is single-valued (cardinality "one": LIVES_IN, WORKS_AT) when a subject has at most
one current object for it; a new value then supersedes the old deterministically, with no LLM.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kg.schemas.labels import check_not_reserved
from kg.schemas.validation import PREDICATE_RE, TYPE_NAME_RE

_NON_WORD = re.compile(r"[^0-9A-Za-z]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def normalize_predicate(raw: str) -> str:
    """'lives in', 'livesIn', '<livesIn>' and 'LIVES_IN' all become 'LIVES_IN'."""
    spaced = _CAMEL.sub("_", raw.strip())
    return _NON_WORD.sub("_", spaced).strip("_").upper()


class Decay(BaseModel):
    """How a fact's weight in ranking fades with the time since it was last stated.

    factor = floor + (1 - floor) * 0.5 ** (age / half_life): 1 when just said, `floor` in
    the end. `half_life_days=None` never fades: for what must not be forgotten (an allergy,
    a prohibition), declared on the predicate so a global decay skips it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    half_life_days: float | None = Field(default=None, gt=0)
    floor: float = Field(default=0.0, ge=0.0, le=1.0)

    def factor(self, age_days: float) -> float:
        if self.half_life_days is None:
            return 1.0
        faded: float = 0.5 ** (max(age_days, 0.0) / self.half_life_days)
        return self.floor + (1.0 - self.floor) * faded


class EntityType(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    decay: Decay | None = Field(
        default=None, description="Recency decay of facts about entities of this type."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not TYPE_NAME_RE.fullmatch(v):
            raise ValueError(
                f"entity type {v!r} must be PascalCase letters and digits (e.g. Person)"
            )
        return check_not_reserved(v)


class Predicate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    cardinality: Literal["one", "many"] = "many"
    description: str = ""
    decay: Decay | None = Field(
        default=None,
        description="Recency decay of its facts; wins over the subject type's and the "
        "ontology's. Decay() (no half-life) never fades.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        v = normalize_predicate(v)
        if not PREDICATE_RE.fullmatch(v):
            raise ValueError(f"predicate {v!r} must be UPPER_SNAKE_CASE, starting with a letter")
        return v

    @property
    def single_valued(self) -> bool:
        return self.cardinality == "one"


class UnknownPredicateError(ValueError):
    pass


class Ontology(BaseModel):
    """`strict` ontologies reject undeclared predicates; lenient ones treat them as multi-valued."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "default"
    entity_types: list[EntityType] = Field(default_factory=list)
    predicates: list[Predicate] = Field(default_factory=list)
    strict: bool = False
    decay: Decay | None = Field(
        default=None, description="Recency decay of every fact not otherwise declared (off)."
    )

    @model_validator(mode="after")
    def _unique(self) -> Self:
        for kind, names in (
            ("predicate", [p.name for p in self.predicates]),
            ("entity type", [t.name for t in self.entity_types]),
        ):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{kind} declared twice: {', '.join(dupes)}")
        return self

    def resolve_predicate(self, raw: str) -> Predicate:
        name = normalize_predicate(raw)
        for p in self.predicates:
            if p.name == name:
                return p
        if self.strict:
            known = ", ".join(p.name for p in self.predicates) or "none"
            raise UnknownPredicateError(
                f"unknown predicate {raw!r} "
                f"(ontology {self.name!r} is strict; it declares: {known})"
            )
        if not PREDICATE_RE.fullmatch(name):
            raise UnknownPredicateError(
                f"predicate {raw!r} has no usable name (normalised to {name!r}); "
                "use letters, digits and underscores, starting with a letter"
            )
        return Predicate(name=name, cardinality="many")

    def decay_for(self, predicate: str, subject_labels: Sequence[str] = ()) -> Decay | None:
        """The predicate's decay, else the subject's type's, else the ontology's (or none)."""
        name = normalize_predicate(predicate)
        for p in self.predicates:
            if p.name == name and p.decay is not None:
                return p.decay
        types = {t.name: t for t in self.entity_types}
        for label in subject_labels:
            t = types.get(label)
            if t is not None and t.decay is not None:
                return t.decay
        return self.decay

    @property
    def decays_by_type(self) -> bool:
        return any(t.decay is not None for t in self.entity_types)

    def resolve_entity_type(self, raw: str | None) -> str | None:
        """The declared type, or in a lenient ontology any PascalCase name that is not one
        of kg's own labels; ValueError otherwise."""
        if raw is None:
            return None
        check_not_reserved(raw)
        for t in self.entity_types:
            if t.name == raw:
                return t.name
        if self.strict or not TYPE_NAME_RE.fullmatch(raw):
            known = ", ".join(t.name for t in self.entity_types) or "none"
            raise ValueError(
                f"unknown entity type {raw!r} (ontology {self.name!r} declares: {known})"
            )
        return raw


DEFAULT_ONTOLOGY = Ontology(
    name="default",
    entity_types=[
        EntityType(name="Person"),
        EntityType(name="Organization"),
        EntityType(name="Place"),
        EntityType(name="Thing"),
    ],
    predicates=[
        Predicate(name="LIVES_IN", cardinality="one", description="Current home city or place."),
        Predicate(name="WORKS_AT", cardinality="one", description="Current employer."),
        Predicate(name="LOCATED_IN", cardinality="one"),
        Predicate(name="MARRIED_TO", cardinality="one"),
        Predicate(name="KNOWS"),
        Predicate(name="LIKES"),
        Predicate(name="OWNS"),
        Predicate(name="MEMBER_OF"),
    ],
    strict=False,
)
