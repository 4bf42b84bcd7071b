"""One search, asked once: the request `KG.search`, `KG.context`, HTTP and MCP all validate.

The group is not part of it: the caller names it (`KG.search(..., group_id=...)`), or a
server's key decides it. Entity names (`center`, `seeds`) are looked up when the search runs.
"""

from __future__ import annotations

import math
from typing import Any, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from kg.retrieval.config import DEFAULT_RECIPE, RECIPES, SearchConfig
from kg.schemas.names import renamed_fields
from kg.schemas.timeparse import TimeInput
from kg.schemas.validation import Text

SCOPES = ("facts", "entities", "episodes", "communities")


# A time read as every surface reads one (kg.schemas.timeparse): ISO-8601, a date, month or
# year, or time words; in UTC, a naive datetime refused by name, never a number.
When = TimeInput


class SearchRequest(BaseModel):
    """What to search for and in which view. Default view: facts true now and still believed.

    `recipe` (see `kg.retrieval.RECIPES`) or `config`, not both; `limit` caps every scope
    the config searches; `center` and `seeds` are entity names (node distance, BFS)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query: Text = Field(description="What to look for, in plain words.")
    recipe: str | None = Field(default=None, description="A named recipe.")
    config: SearchConfig | None = None
    limit: int | None = None
    valid_at: When | None = Field(default=None, description="Valid time; default now.")
    known_at: When | None = Field(
        default=None, description="Transaction time: as kg knew it then; default now."
    )
    include_closed: bool = Field(
        default=False, description="Also closed facts (no longer true), marked closed."
    )
    include_contested: bool = False
    center: Text | None = Field(default=None, description="Entity name to rank around.")
    seeds: list[Text] = Field(default_factory=list, description="Entity names to start BFS at.")
    min_score: float | None = None
    abstain_below: float | None = Field(
        default=None,
        description="Leave a scope empty when its best cosine similarity to the query is below "
        "this (about 0.49 for MiniLM): a question about something never said. Needs an "
        "embedder and the cosine method; `abstained` names the scopes left empty.",
    )
    abstain_joint_below: float | None = Field(
        default=None,
        description="Leave a scope empty when no candidate is found by both meaning and words: "
        "the best mean of a candidate's cosine similarity and its BM25 share of the most the "
        "query could score is below this (MiniLM: 0.27 on unextracted turns, 0.35 on kg eval's "
        "sets; calibrate, see docs/retrieval.md). Needs an embedder, the bm25 and cosine "
        "methods, and FalkorDB.",
    )
    asked_at: When | None = Field(
        default=None,
        description="When the question is asked: time words in the query ('last March', "
        "'in 2022') are read against it. Default: valid_at, else now.",
    )

    @model_validator(mode="before")
    @classmethod
    def _library_old_names(cls, data: Any) -> Any:
        # A subclass that declares the old name (the server's) notes its use itself.
        if "include_history" in cls.model_fields:
            return data
        return renamed_fields(data, {"include_history": "include_closed"})

    @field_validator("query")
    @classmethod
    def _some_query(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("search needs a non-empty query")
        return value

    @field_validator("recipe")
    @classmethod
    def _known_recipe(cls, value: str | None) -> str | None:
        if value is not None and value not in RECIPES:
            raise ValueError(f"unknown recipe {value!r}; known: {', '.join(sorted(RECIPES))}")
        return value

    @field_validator("limit")
    @classmethod
    def _limit(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= 1000:
            raise ValueError(f"limit must be in 1..1000, got {value}")
        return value

    @field_validator("min_score")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError(f"min_score must be a finite number, got {value!r}")
        return value

    @field_validator("abstain_below", "abstain_joint_below")
    @classmethod
    def _cosine(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is not None and not -1.0 <= value <= 1.0:
            raise ValueError(f"{info.field_name} is a similarity, in -1..1: {value}")
        return value

    @model_validator(mode="after")
    def _recipe_or_config(self) -> Self:
        if self.recipe is not None and self.config is not None:
            raise ValueError("give a recipe or a config, not both")
        return self

    def search_config(self) -> SearchConfig:
        """The config the search runs: the recipe's (or the one given), with the request's
        limit, min_score and abstention cutoffs."""
        config = self.config or RECIPES[self.recipe or DEFAULT_RECIPE]
        update: dict[str, Any] = {}
        if self.min_score is not None:
            update["min_score"] = self.min_score
        if self.abstain_below is not None:
            update["abstain_below"] = self.abstain_below
        if self.abstain_joint_below is not None:
            update["abstain_joint_below"] = self.abstain_joint_below
        if self.limit is not None:
            for scope in SCOPES:
                sc = getattr(config, scope)
                if sc is not None:
                    update[scope] = sc.model_copy(update={"limit": self.limit})
        return config.model_copy(update=update) if update else config


class ContextRequest(SearchRequest):
    """A search rendered as a quoted-data block for a prompt, within `max_tokens` (a hit
    that would overflow it is left out whole)."""

    max_tokens: int = Field(
        default=1000, ge=50, le=20_000, description="Budget for the block, in tokens."
    )
