"""Old field and parameter names, read for one more release: a request model renames them
(`Renamed`), and the answer to a request that used one carries `Deprecation: true` and a
`Deprecation-Note` naming the new names, so a client learns of them before the old ones go."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, ClassVar

from pydantic import BaseModel, model_validator
from starlette.types import ASGIApp, Message, Receive, Scope, Send

Renames = dict[str, tuple[str, Callable[[Any], Any]]]
_USED: ContextVar[list[str] | None] = ContextVar("kg_deprecated_names", default=None)


def _same(value: Any) -> Any:
    return value


def _negated(value: Any) -> Any:
    """`apply: true` is `dry_run: false`; anything but a boolean is left for the model to
    refuse under its new name."""
    return not value if isinstance(value, bool) else value


class Renamed(BaseModel):
    """A request model that still reads old names: `RENAMED` maps each to its new name and
    how its value converts."""

    RENAMED: ClassVar[Renames] = {}

    @model_validator(mode="before")
    @classmethod
    def _renamed_for_http(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not cls.RENAMED:
            return data
        data = dict(data)
        for old, (new, convert) in cls.RENAMED.items():
            if old not in data:
                continue
            if new in data:
                raise ValueError(f"{old} is the old name of {new}: give {new} only")
            data[new] = convert(data.pop(old))
            used = _USED.get()
            if used is not None:
                used.append(f"{old} is now {new}")
        return data


def renamed(new: str, *, negate: bool = False) -> tuple[str, Callable[[Any], Any]]:
    return new, _negated if negate else _same


def deprecated_names(model: type[BaseModel]) -> list[str]:
    return list(getattr(model, "RENAMED", {}))


class Deprecations:
    """Pure ASGI: collects the old names a request used and marks its answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        used: list[str] = []
        token = _USED.set(used)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and used:
                headers = list(message.get("headers", []))
                headers.append((b"deprecation", b"true"))
                headers.append((b"deprecation-note", "; ".join(used).encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            _USED.reset(token)
