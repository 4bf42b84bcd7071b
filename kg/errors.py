"""Errors kg raises on purpose. Each message names the problem; the CLI prints it on one line."""

from __future__ import annotations

import json
import sys
from typing import Any

from kg.schemas.errors import InputError, KGError
from kg.schemas.validation import check_group_id, validation_message

__all__ = [
    "DataDirLockedError",
    "ExtractionError",
    "InputError",
    "KGError",
    "LLMRequiredError",
    "LeaseLostError",
    "NotFoundError",
    "StoreError",
    "StoreUnavailableError",
    "WriteConflictError",
    "check_group",
    "json_object",
    "validation_message",
]


class NotFoundError(InputError):
    """The episode, fact or entity named is not in the group (the server answers 404)."""


class LLMRequiredError(InputError):
    """A text, message or JSON episode was sent for extraction to a kg opened with no LLM."""


class DataDirLockedError(KGError):
    """Another process owns the embedded data directory."""


class StoreUnavailableError(KGError):
    """The graph server cannot be started or reached."""


class ExtractionError(KGError):
    """The LLM step failed; the episode is recorded as failed (retryable), no facts written."""


class LeaseLostError(KGError):
    """A worker's lease on a queued episode lapsed and another worker took the episode over:
    the write that needed the lease wrote nothing."""


class StoreError(KGError):
    """The graph server refused a query; the write plan was not applied."""


class WriteConflictError(StoreError):
    """Another writer changed the group after this write was planned; nothing was written.
    The facade re-reads and re-plans; it raises this only once its attempts are spent."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (numbers must be finite)")


def json_object(line: str, where: str) -> dict[str, Any]:
    """One JSON Lines record, or an InputError naming the file, line and column.

    Never another exception: nesting too deep for the parser, integers longer than Python
    converts (4300 digits) and the non-JSON constants NaN and Infinity are errors too."""
    try:
        data = json.loads(line, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: malformed JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply to read") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            raise InputError(
                f"{where}: a number with more than {sys.get_int_max_str_digits()} digits"
            ) from None
        raise InputError(f"{where}: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(data).__name__}")
    return data


def check_group(group_id: str) -> str:
    """A group id, or an InputError naming what is wrong with it."""
    try:
        return check_group_id(group_id)
    except ValueError as exc:
        raise InputError(str(exc)) from None
