"""`kg.client`: the HTTP API of a `kg serve` as `KG`'s own methods (`AsyncClient`), its reads
answered in the shared JSON shapes (kg.schemas.views, kg.client.answers),
its problems raised as kg's own exceptions (kg.client.errors). It never imports the store,
the server or the facade: import-linter's `client` contract checks that."""

from kg.client.answers import Entity, EpisodeInfo, SearchAnswer, WhyAnswer
from kg.client.client import AsyncClient, Whoami
from kg.client.errors import AccessDeniedError, RateLimitedError, ServerError

__all__ = [
    "AccessDeniedError",
    "AsyncClient",
    "Entity",
    "EpisodeInfo",
    "RateLimitedError",
    "SearchAnswer",
    "ServerError",
    "Whoami",
    "WhyAnswer",
]
