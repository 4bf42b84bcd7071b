"""What the extraction LLM call must return for one episode (its JSON schema is sent)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr


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
    # Asked of a small model (CompactExtraction): vetting also wants the quote to hold two
    # content words and every name to be found in the episode (kg.ingest.extraction.vet).
    _strict: bool = PrivateAttr(default=False)


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


class CompactFact(BaseModel):
    """One fact in the small-model reply: the quote first, so the words are copied before
    the model says what they mean; no entity list, no end time."""

    model_config = ConfigDict(extra="ignore")

    quote: str = Field(
        description="Words copied from the episode.", json_schema_extra={"maxLength": 120}
    )
    subject: str = Field(json_schema_extra={"maxLength": 32})
    predicate: str = Field(description="UPPER_SNAKE_CASE.", json_schema_extra={"maxLength": 32})
    object: str = Field(json_schema_extra={"maxLength": 60})
    fact: str = Field(description="One short sentence.", json_schema_extra={"maxLength": 120})
    valid_at: str | None = Field(
        default=None,
        description="Time words from the episode, or null.",
        json_schema_extra={"maxLength": 40},
    )

    def full(self) -> ExtractedFact:
        return ExtractedFact(
            subject=self.subject,
            predicate=self.predicate,
            object=self.object,
            fact=self.fact,
            quote=self.quote,
            valid_at=self.valid_at,
        )


class CompactExtraction(BaseModel):
    """The reply asked of small models (kg.ingest.profiles): facts only, at most a few.

    The length caps go to the server's grammar only (validation accepts longer replies): a
    135M model under a grammar otherwise loops inside a string until the token cap.
    """

    model_config = ConfigDict(extra="ignore")

    facts: list[CompactFact] = Field(default_factory=list, json_schema_extra={"maxItems": 2})

    def full(self) -> Extraction:
        extraction = Extraction(facts=[f.full() for f in self.facts])
        extraction._strict = True
        return extraction
