"""The server's logging: one format and level for every logger (uvicorn, kg, the MCP SDK and
the libraries under them), and a filter on every handler that masks secrets wherever they
appear: API keys (in a path, a header dump, a library's debug line or a traceback), bearer
credentials, and the operator's own secrets (metrics token, LLM API key).

A filter on the handlers, not on loggers, so it sees records propagated from any logger.
`kg serve --log-format json` writes each line as one JSON object (`JsonFormatter`) carrying
the request id and the key id (never the key) of the request it was written in.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Literal

from uvicorn.config import LOGGING_CONFIG

from kg.server.auth import AUTH
from kg.server.keys import Principal, redact_keys
from kg.server.request_ids import REQUEST_STATE, STATE

_BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s'\",;]+")
MASK = "[redacted]"


class Redact(logging.Filter):
    """Masks secrets in a record's message, arguments and traceback; never drops a record."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        text = redact_keys(text)
        return _BEARER.sub(lambda m: m.group(1) + MASK, text)

    def _arg(self, value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float):
            return value  # formatted with %d and the like: keep the type
        text = value if isinstance(value, str) else str(value)
        clean = self.redact(text)
        return value if clean == text and not isinstance(value, str) else clean

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = self.redact(record.msg)
        else:
            record.msg = self._arg(record.msg)
        if isinstance(record.args, dict):
            record.args = {k: self._arg(v) for k, v in record.args.items()}
        elif isinstance(record.args, tuple):
            record.args = tuple(self._arg(a) for a in record.args)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


LogFormat = Literal["text", "json"]
ACCESS_FIELDS = ("method", "route", "status", "duration_ms")  # an access line's extras


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC), level, logger and message (masked by `Redact`
    before this runs); `request_id` and `key_id` when written during a request (the key id
    once the key is known, the public part only); an access line's method, route template,
    status and duration. Nothing a caller sent is added: no body, no query value, no key."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        out: dict[str, Any] = {
            "time": stamp.replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        state = REQUEST_STATE.get()
        if state is not None:
            out["request_id"] = state.get(STATE)
            found = state.get(AUTH)
            if isinstance(found, Principal):
                out["key_id"] = found.key_id
        out.update({k: getattr(record, k) for k in ACCESS_FIELDS if hasattr(record, k)})
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exception"] = record.exc_text
        return json.dumps(out, ensure_ascii=False, default=str)


def log_config(level: str, secrets: Iterable[str] = (), fmt: LogFormat = "text") -> dict[str, Any]:
    """uvicorn's logging config, extended to every logger at `level`, secrets masked; with
    `fmt="json"`, every line a JSON object (`JsonFormatter`)."""
    config = copy.deepcopy(LOGGING_CONFIG)
    if fmt == "json":
        for name in ("default", "access"):
            config["formatters"][name] = {"()": JsonFormatter}
    config["filters"] = {"redact": {"()": Redact, "secrets": list(secrets)}}
    for handler in config["handlers"].values():
        handler["filters"] = ["redact"]
    name = level.upper()
    config["root"] = {"handlers": ["default"], "level": name}
    config["loggers"]["kg"] = {"level": name}
    # The access log (kg.server.access) in uvicorn's access format, in place of uvicorn's.
    config["loggers"]["kg.access"] = {"handlers": ["access"], "level": name, "propagate": False}
    return config
