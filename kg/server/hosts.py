"""DNS-rebinding and cross-site guards, in front of every route (API, MCP, inspector).

A page on another site can reach a server on the user's machine two ways: by rebinding its
own host name to 127.0.0.1 (its requests then carry `Host: evil.example`), and by a
cross-site form or fetch (carrying `Origin: https://evil.example`). So every request whose
Host names no allowed host is refused (421), and every state-changing request (any method
but GET, HEAD and OPTIONS) whose Origin is present and not this server's own (the Host it
was sent to) is refused (403). Requests without an Origin (curl, SDKs, agents) pass: only
browsers send one, and they always do on such requests.

Allowed hosts: the loopback names always (only a browser that means this machine sends
them), the address the server is bound to, and the names given with `--allowed-host`. A
server bound to every interface needs that list (`allowed_hosts` refuses to start it
without one): the check is never silently off. `*` in the list accepts any Host (behind a
proxy that checks it); the Origin check stays on.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from kg.errors import InputError
from kg.server.problems import problem

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
WILDCARD = frozenset({"0.0.0.0", "::", ""})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def host_name(host: str) -> str:
    """'Example.com:8321' -> 'example.com'; '[::1]:80' -> '::1'; a bare IPv6 stays as is."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    if host.count(":") == 1:
        return host.split(":", 1)[0]
    return host


def _netloc(host: str, scheme: str) -> str:
    """host[:port] lowercased, the scheme's default port left out (as browsers send it)."""
    host = host.strip().lower()
    default = {"http": ":80", "https": ":443"}.get(scheme, "")
    return host[: -len(default)] if default and host.endswith(default) else host


@dataclass(frozen=True)
class HostPolicy:
    names: frozenset[str]  # host names (no port), lowercase
    any_host: bool = False

    def allows(self, host: str | None) -> bool:
        if host is None:  # HTTP/1.0 without Host: no browser sends that
            return True
        return self.any_host or host_name(host) in self.names


def allowed_hosts(bind: str, extra: Iterable[str] = ()) -> HostPolicy:
    """The policy for a server bound to `bind` with `extra` allowed host names; a wildcard
    bind with no names is an error (the check would have nothing to allow)."""
    names = {host_name(h) for h in extra if h.strip()}
    any_host = "*" in names
    names.discard("*")
    bind = host_name(bind) if not bind.startswith("[") else bind.strip("[]").lower()
    if bind in WILDCARD:
        if not names and not any_host:
            shown = bind or "''"
            raise InputError(
                f"--host {shown} listens on every interface: name the host names clients "
                "use with --allowed-host (or KG_ALLOWED_HOSTS), e.g. --allowed-host "
                "kg.example.com; '*' accepts any Host (behind a proxy that checks it)"
            )
    else:
        names.add(bind)
    for name in names:
        if not name or any(c in name for c in "/ ?#@"):
            raise InputError(f"--allowed-host: {name!r} is not a host name or address")
        if ":" in name:
            try:
                ipaddress.IPv6Address(name)
            except ValueError:
                raise InputError(
                    f"--allowed-host: {name!r} is not a host name or address"
                ) from None
    return HostPolicy(names=frozenset(names | LOOPBACK), any_host=any_host)


class HostGuard:
    """Pure ASGI: refuses a foreign Host on every request and a foreign Origin on every
    state-changing one, before anything else runs."""

    def __init__(self, app: ASGIApp, policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host")
        state = scope.setdefault("state", {})
        if not self.policy.allows(host):
            state["problem"] = "foreign_host"
            detail = (
                "this server does not answer to that Host (a DNS-rebinding guard); the "
                "operator allows more names with kg serve --allowed-host"
            )
            await problem(421, "Misdirected request", detail)(scope, receive, send)
            return
        origin = headers.get("origin")
        if (
            scope["method"] not in SAFE_METHODS
            and origin is not None
            and not self._same(origin, host, scope)
        ):
            state["problem"] = "foreign_origin"
            detail = "cross-site request refused: its Origin is not this server"
            await problem(403, "Forbidden", detail)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _same(self, origin: str, host: str | None, scope: Scope) -> bool:
        """The page that sent it was served by this server, under the Host it addressed."""
        parts = urlsplit(origin.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc or host is None:
            return False  # 'null' (a sandboxed or file page) included
        if not self.policy.allows(parts.netloc):
            return False
        return _netloc(parts.netloc, parts.scheme) == _netloc(host, parts.scheme)
