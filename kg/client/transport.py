"""The client's one HTTP session: the key on every request, problems raised as kg's
exceptions (kg.client.errors), 429s waited out within a budget, and lists followed page by
page (`{"items", "next_cursor"}`) as async iterators."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter

from kg.client.errors import RateLimitedError, problem_error
from kg.errors import StoreUnavailableError
from kg.schemas.timeparse import parse_time
from kg.times import utc

T = TypeVar("T")
MAX_PAGE = 1000  # the server's largest page (kg.server.pages.MAX_PAGE)


def iso(field: str, value: datetime | str | None) -> str | None:
    """A time argument as the server reads it, read as `KG` reads it: a naive datetime is
    refused, text goes through the one time parser (ISO-8601, dates, time words)."""
    if value is None:
        return None
    when = parse_time(value, field=field) if isinstance(value, str) else utc(value, field=field)
    return when.isoformat()


def params(**given: Any) -> dict[str, Any]:
    """Query parameters, those left unset (None) left out."""
    return {k: v for k, v in given.items() if v is not None}


class Session:
    """An httpx.AsyncClient bound to one server and key."""

    def __init__(
        self,
        url: str,
        key: str | None,
        *,
        timeout: float,
        rate_limit_wait: float,
        page_size: int = MAX_PAGE,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.url = url.rstrip("/")
        self.http = httpx.AsyncClient(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )
        self.rate_limit_wait = rate_limit_wait
        self.page_size = min(max(1, page_size), MAX_PAGE)

    async def close(self) -> None:
        await self.http.aclose()

    async def send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> httpx.Response:
        """One request; a 429 is retried after its Retry-After while the waits stay within
        `rate_limit_wait` seconds in all, then raised (`RateLimitedError.retry_after`)."""
        waited = 0.0
        while True:
            try:
                response = await self.http.request(method, path, params=query, json=body)
            except httpx.TransportError as exc:
                raise StoreUnavailableError(f"cannot reach kg serve at {self.url}: {exc}") from exc
            if response.is_success:
                return response
            error = problem_error(response)
            if not isinstance(error, RateLimitedError):
                raise error
            if waited + error.retry_after > self.rate_limit_wait:
                raise error
            await asyncio.sleep(error.retry_after)
            waited += error.retry_after

    async def get(self, path: str, model: type[T], **query: Any) -> T:
        response = await self.send("GET", path, query=params(**query))
        return TypeAdapter(model).validate_json(response.content)

    async def post(self, path: str, model: type[T], body: BaseModel | dict[str, Any]) -> T:
        data = (
            body.model_dump(mode="json", exclude_none=True) if isinstance(body, BaseModel) else body
        )
        response = await self.send("POST", path, body=data)
        return TypeAdapter(model).validate_json(response.content)

    async def items(
        self, path: str, model: type[T], limit: int | None = None, **query: Any
    ) -> AsyncIterator[T]:
        """Every item of a list, following `next_cursor` (at most `limit` items)."""
        item = TypeAdapter(model)
        cursor: str | None = None
        left = limit
        while left is None or left > 0:
            size = self.page_size if left is None else min(left, self.page_size)
            response = await self.send(
                "GET", path, query=params(**query, limit=size, cursor=cursor)
            )
            page = response.json()
            for raw in page["items"][:size]:
                yield item.validate_python(raw)
                if left is not None:
                    left -= 1
            cursor = page.get("next_cursor")
            if not cursor or not page["items"]:
                return

    async def lines(self, path: str, **query: Any) -> AsyncIterator[str]:
        """A JSON Lines answer, line by line, as it streams."""
        async with self.http.stream("GET", path, params=params(**query)) as response:
            if not response.is_success:
                await response.aread()
                raise problem_error(response)
            async for line in response.aiter_lines():
                if line:
                    yield line
