"""What the client returns from reads: the server's JSON shapes (kg.schemas.views), the same
on HTTP, MCP and `kg ... --json`, not the engine's stored models. Lists arrive as pages
(`Page`) that the client follows; what the server adds to a view (an episode's error and
content, an entity's counts, a search's rankings) is kept."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kg.schemas.views import EntityView, EpisodeView, FactView, HitView

__all__ = ["Entity", "EpisodeInfo", "SearchAnswer", "WhyAnswer"]


class EpisodeInfo(EpisodeView):
    """An episode (`episodes()`, `episode(id)`): its view, what became of it, and, read
    one at a time, its content and metrics."""

    model_config = ConfigDict(extra="allow")

    error: str | None = None
    facts_added: int = 0
    facts_closed: int = 0
    content: str | None = Field(default=None, description="Only when read by `episode(id)`.")


class Entity(EntityView):
    """An entity (`entities()`): its view and the fact versions naming it."""

    as_subject: int = 0
    as_object: int = 0


class WhyAnswer(BaseModel):
    """`why(fact_id)`: every version (oldest first), the episodes behind it and that closed
    it, and what each supporting episode said."""

    versions: list[FactView]
    episodes: list[EpisodeInfo]
    statements: list[dict[str, Any]] = Field(default_factory=list)


class SearchAnswer(BaseModel):
    """`search(...)`: every hit, best first, in the one hit shape; `rankings`, `branches`
    and `time` as the server sends them (the CLI's --explain)."""

    model_config = ConfigDict(extra="allow")

    query: str
    hits: list[HitView]
    abstained: dict[str, float] = Field(default_factory=dict)
    abstain_checks: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict,
        description="Per scope, the abstention tests run (signal, value, cutoff, abstained).",
    )
    latency_ms: float = 0.0

    @property
    def facts(self) -> list[HitView]:
        """The fact hits, best first."""
        return [h for h in self.hits if h.kind == "fact"]

    @property
    def episodes(self) -> list[HitView]:
        """The episode hits, best first."""
        return [h for h in self.hits if h.kind == "episode"]
