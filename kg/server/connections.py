"""Connection limits uvicorn lacks: a deadline for a request's headers, and a cap on the
connections one client address holds open.

uvicorn times out an idle keep-alive connection, but not one that has sent part of a request
line or headers (nor a fresh one that has sent nothing): thousands of such connections stay
open for as long as their clients like. This protocol (uvicorn's h11 one, extended) closes
a connection whose headers are not complete `header_seconds` after it opened or after its
previous response, and refuses (429, then closes) a connection from an address that already
holds `per_client` open ones. Behind a reverse proxy every client shares the proxy's
address: raise `per_client` there (or set it to 0, no cap) and let the proxy cap clients.
The body's own deadline is kg.server.bodies'.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("kg.server")
_REFUSED = (
    b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"retry-after: 1\r\nconnection: close\r\ncontent-length: 43\r\n\r\n"
    b"too many open connections from this client\n"
)


@dataclass(frozen=True)
class ConnectionLimits:
    header_seconds: float = 10.0  # for a request's line and headers to arrive
    per_client: int = 64  # open connections one client address may hold; 0: no cap


def guarded_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """An HTTP protocol class for `uvicorn.Config(http=...)` applying `limits`; its count of
    open connections per address is its own (one per server)."""
    open_by_client: Counter[str] = Counter()

    class Guarded(H11Protocol):
        _counted: str | None = None
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            address = self.client[0] if self.client else None
            if address is not None and limits.per_client:
                if open_by_client[address] >= limits.per_client:
                    log.warning(
                        "refused a connection: %d open from one client (the cap)",
                        open_by_client[address],
                    )
                    transport.write(_REFUSED)
                    transport.close()
                    return
                open_by_client[address] += 1
                self._counted = address
            self._await_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_header_timer()
            if self._counted is not None:
                open_by_client[self._counted] -= 1
                if open_by_client[self._counted] <= 0:
                    del open_by_client[self._counted]
                self._counted = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._stop_header_timer()  # the request's headers are in

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._await_headers()  # the next request's headers get their own deadline

        def _await_headers(self) -> None:
            self._stop_header_timer()
            self._header_timer = self.loop.call_later(limits.header_seconds, self._headers_late)

        def _stop_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return Guarded
