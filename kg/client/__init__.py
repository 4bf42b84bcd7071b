"""`kg.client`: the HTTP API of a `kg serve` as `KG`'s own methods and models (`AsyncClient`),
its problems raised as kg's own exceptions (kg.client.errors). It never imports the store,
the server or the facade: import-linter's `client` contract checks that."""

from kg.client.client import AsyncClient, Whoami
from kg.client.errors import AccessDeniedError, RateLimitedError, ServerError

__all__ = ["AccessDeniedError", "AsyncClient", "RateLimitedError", "ServerError", "Whoami"]
