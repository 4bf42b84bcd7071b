"""`kg serve`'s options that an operator sets once for a deployment (address, logs, the
metrics token, the Host names), each with its environment variable, so that a container or
a `kg.toml` (kg.cli.config_file) can set them too. Kept here, out of the command's body."""

from __future__ import annotations

from typing import Annotated

import typer

HostOpt = Annotated[str, typer.Option(envvar="KG_HOST", help="Address to listen on.")]
PortOpt = Annotated[
    int, typer.Option(envvar="KG_PORT", min=0, max=65535, help="Port to listen on.")
]
LogLevelOpt = Annotated[
    str, typer.Option(envvar="KG_LOG_LEVEL", help="debug, info, warning, error.")
]
LogFormatOpt = Annotated[
    str,
    typer.Option(
        envvar="KG_LOG_FORMAT",
        help="'text' (uvicorn's lines) or 'json': one object a line, with the request id "
        "(X-Request-Id) and the key id, never the key or what was asked.",
    ),
]
MetricsTokenOpt = Annotated[
    str | None,
    typer.Option(
        envvar="KG_METRICS_TOKEN",
        show_default=False,
        help="Bearer token that also gets every keyed group's metrics at /metrics.",
    ),
]
AllowedHostOpt = Annotated[
    list[str] | None,
    typer.Option(
        envvar="KG_ALLOWED_HOSTS",
        show_default=False,
        help="A Host name clients reach the server by, besides the loopback names and "
        "--host (repeat it; in KG_ALLOWED_HOSTS, separate by commas). Needed with --host "
        "0.0.0.0; '*' accepts any Host (behind a proxy that checks it).",
    ),
]

MaxBodyOpt = Annotated[int, typer.Option(min=1024, help="Largest request body accepted, in bytes.")]
GracefulTimeoutOpt = Annotated[
    int,
    typer.Option(
        min=1,
        help="Seconds open requests and the background worker's extraction in flight get "
        "to finish at shutdown.",
    ),
]
MetricsFlushOpt = Annotated[
    float,
    typer.Option(min=0.1, help="Seconds between saves of query and API metrics to the store."),
]
KeyConcurrencyOpt = Annotated[
    int,
    typer.Option(
        min=0, help="Requests of one key running at once; more wait their turn (0: no limit)."
    ),
]
KeySearchConcurrencyOpt = Annotated[
    int,
    typer.Option(
        min=0, help="Of those, searches, contexts and MCP calls (0: no limit of their own)."
    ),
]
KeyQueueOpt = Annotated[
    int, typer.Option(min=0, help="Requests of one key that may wait their turn.")
]
KeyRateOpt = Annotated[
    float, typer.Option(min=0, help="Requests a second one key may send (0: no limit).")
]
KeyBurstOpt = Annotated[
    int, typer.Option(min=1, help="Requests one key may send at once, above --key-rate.")
]
KeySearchCostOpt = Annotated[
    float,
    typer.Option(
        min=1, help="Requests a search, a context or an MCP call counts as, for --key-rate."
    ),
]
HeaderTimeoutOpt = Annotated[
    float, typer.Option(min=0.1, help="Seconds for a request's headers to arrive.")
]
BodyTimeoutOpt = Annotated[
    float, typer.Option(min=0.1, help="Seconds for a request's body to arrive.")
]
ClientConnectionsOpt = Annotated[
    int,
    typer.Option(
        min=0,
        help="Connections one client address may hold open (0: no cap; raise it "
        "behind a proxy, where every client has the proxy's address).",
    ),
]


def check_log_format(value: str) -> str | None:
    """The one-line error for a log format that is not one, else None."""
    if value not in ("text", "json"):
        return f"--log-format: {value!r} is not one of text, json"
    return None
