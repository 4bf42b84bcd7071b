"""What the extraction LLM call must return for one episode (its JSON schema is sent)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ExtractedEntity(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    type: str | None = Field(default=None, description="One of the ontology's entity types.")


class ExtractedFact(BaseModel):
    model_config = ConfigDict(extra="ignore")

    subject: str
    predicate: str = Field(description="UPPER_SNAKE_CASE; one of the ontology's predicates.")
    object: str
    fact: str = Field(description="The fact as one self-contained sentence.")
    quote: str = Field(description="The exact words of the episode that state it.")
    valid_at: str | None = Field(
        default=None,
        description="When it became true, as said: an ISO date, or the words used "
        "('2 weeks ago', 'last March', 'since 2019'); null if not said.",
    )
    invalid_at: str | None = Field(
        default=None, description="When it stopped being true, as said; null if not said."
    )


class Extraction(BaseModel):
    model_config = ConfigDict(extra="ignore")

    entities: list[ExtractedEntity] = Field(default_factory=list)
    facts: list[ExtractedFact] = Field(default_factory=list)


class EntityMatch(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(description="The new name, as listed (e.g. 'N1').")
    same_as: str | None = Field(
        default=None, description="The id of the existing entity it is (e.g. 'E2'), or null."
    )


class FactMatch(BaseModel):
    model_config = ConfigDict(extra="ignore")

    fact: str = Field(description="The new fact's id, as listed (e.g. 'F1').")
    duplicate_of: str | None = Field(
        default=None, description="The id of an existing fact that says the same thing, or null."
    )
    contradicts: list[str] = Field(
        default_factory=list,
        description="Ids of existing facts that cannot both be true with the new fact.",
    )


class Resolution(BaseModel):
    """What the resolution LLM call must return: decisions on the listed candidates only."""

    model_config = ConfigDict(extra="ignore")

    entities: list[EntityMatch] = Field(default_factory=list)
    facts: list[FactMatch] = Field(default_factory=list)
