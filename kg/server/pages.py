"""Cursor pagination for the server's lists: a page of items and an opaque `next_cursor`,
which the next request passes back as `cursor`.

A cursor is the page's last row's sort key, tagged with the list it belongs to, in base64url:
opaque to clients (what it holds may change), stable (pages follow the store's order,
newest first, and start strictly after the cursor, so rows added meanwhile neither shift
nor repeat a page) and cheap (the store reads only the page after it, never the rows
before). Any list can use `read_page` with a store read that takes a limit and a
`PageAfter`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from pydantic import BaseModel, Field, ValidationError

from kg.errors import InputError
from kg.schemas.store import PageAfter

T = TypeVar("T")
MAX_CURSOR = 1000  # characters: a cursor is a time and an id, well under this


class Page(BaseModel, Generic[T]):
    """One page of a list, newest first."""

    items: list[T]
    next_cursor: str | None = Field(
        default=None,
        description="Pass it as `cursor` for the next page; null on the last page.",
    )


def encode_cursor(kind: str, after: PageAfter) -> str:
    raw = json.dumps({"k": kind, "t": after.created_at.isoformat(), "u": after.uuid})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(kind: str, cursor: str) -> PageAfter:
    """The position a cursor of list `kind` stands for; anything else is a one-line 422."""
    bad = InputError(f"cursor: not a cursor from this list ({kind}); pass next_cursor back as is")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("k") != kind:
            raise bad
        return PageAfter(created_at=data["t"], uuid=data["u"])
    except (binascii.Error, ValueError, KeyError, TypeError, ValidationError):
        raise bad from None


async def read_page(
    kind: str,
    limit: int,
    cursor: str | None,
    read: Callable[[int, PageAfter | None], Awaitable[list[T]]],
    key: Callable[[T], PageAfter],
) -> Page[T]:
    """One page from `read(n, after)`, which returns up to n rows after `after` in the list's
    order: one row more than the page is asked for, to know whether another page follows."""
    after = decode_cursor(kind, cursor) if cursor else None
    rows = await read(limit + 1, after)
    more = len(rows) > limit
    rows = rows[:limit]
    return Page[T](items=rows, next_cursor=encode_cursor(kind, key(rows[-1])) if more else None)
