"""The server's logging: one format and level for every logger (uvicorn, kg, the MCP SDK and
the libraries under them), and a filter on every handler that masks secrets wherever they
appear: API keys (in a path, a header dump, a library's debug line or a traceback), bearer
credentials, and the operator's own secrets (metrics token, LLM API key).

A filter on the handlers, not on loggers, so it sees records propagated from any logger.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Iterable
from typing import Any

from uvicorn.config import LOGGING_CONFIG

from kg.server.keys import redact_keys

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


def log_config(level: str, secrets: Iterable[str] = ()) -> dict[str, Any]:
    """uvicorn's logging config, extended to every logger at `level`, secrets masked."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {"redact": {"()": Redact, "secrets": list(secrets)}}
    for handler in config["handlers"].values():
        handler["filters"] = ["redact"]
    name = level.upper()
    config["root"] = {"handlers": ["default"], "level": name}
    config["loggers"]["kg"] = {"level": name}
    # The access log (kg.server.access) in uvicorn's access format, in place of uvicorn's.
    config["loggers"]["kg.access"] = {"handlers": ["access"], "level": name, "propagate": False}
    return config
