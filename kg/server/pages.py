"""Cursor pagination for the server's lists: a page of items and an opaque `next_cursor`,
which the next request passes back as `cursor`.

A cursor is the page's last row's sort key, tagged with the list it belongs to, in base64url:
opaque to clients (what it holds may change), stable (pages follow the store's order,
newest first, and start strictly after the cursor, so rows added meanwhile neither shift
nor repeat a page) and cheap (the store reads only the page after it, never the rows
before). Any list can use `read_page` with a store read that takes a limit and a
`PageAfter`.

Lists whose store read has no keyset position yet (facts, history, entities, the log) page
by position (`read_offset_page`): their cursor holds how many rows came before and the time
the first page was read at, which later pages read the same view at (so "now" does not move
between pages); such a list reaches its store read's own cap (`most`) and no further.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from kg.errors import InputError
from kg.schemas.store import PageAfter
from kg.schemas.views import Page

T = TypeVar("T")
U = TypeVar("U")
__all__ = ["MAX_CURSOR", "MAX_PAGE", "Page", "mapped", "read_offset_page", "read_page"]
MAX_CURSOR = 1000  # characters: a cursor is a time and an id, well under this
MAX_PAGE = 1000  # items in one page of any list


def mapped(page: Page[T], view: Callable[[T], U]) -> Page[U]:
    """The same page, each item shown through `view` (a stored model as its JSON shape)."""
    return Page[U](items=[view(item) for item in page.items], next_cursor=page.next_cursor)


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


class Position(BaseModel):
    """Where a positional page starts, and the time the list's first page was read at."""

    offset: int = 0
    at: datetime | None = None


def encode_position(kind: str, position: Position) -> str:
    at = position.at.isoformat() if position.at else None
    raw = json.dumps({"k": kind, "o": position.offset, "t": at})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_position(kind: str, cursor: str) -> Position:
    bad = InputError(f"cursor: not a cursor from this list ({kind}); pass next_cursor back as is")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("k") != kind or "o" not in data:
            raise bad
        found = Position(offset=data["o"], at=data.get("t"))
    except (binascii.Error, ValueError, KeyError, TypeError, ValidationError):
        raise bad from None
    if found.offset < 0:
        raise bad
    return found


async def read_offset_page(
    kind: str,
    limit: int,
    cursor: str | None,
    read: Callable[[int, datetime | None], Awaitable[list[T]]],
    *,
    most: int,
    now: datetime | None = None,
) -> Page[T]:
    """One page from `read(n, at)`, which returns the first n rows of the list as seen at
    `at` (the first page's `now`, kept in the cursor). A page past `most` rows is refused."""
    position = decode_position(kind, cursor) if cursor else Position(at=now)
    want = position.offset + limit + 1
    if position.offset >= most:
        raise InputError(
            f"cursor: this list pages through its first {most} rows only; narrow the query"
        )
    rows = await read(min(want, most), position.at)
    page = rows[position.offset : position.offset + limit]
    more = len(rows) > position.offset + limit
    after = encode_position(kind, Position(offset=position.offset + limit, at=position.at))
    return Page[T](items=page, next_cursor=after if more else None)
