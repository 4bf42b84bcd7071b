"""Errors kg raises on purpose. Each message names the problem; the CLI prints it on one line."""

from __future__ import annotations

from schemas.validation import validation_message

__all__ = [
    "DataDirLockedError",
    "ExtractionError",
    "InputError",
    "KGError",
    "StoreError",
    "StoreUnavailableError",
    "validation_message",
]


class KGError(Exception):
    """Base class: anything kg raises deliberately."""


class InputError(KGError, ValueError):
    """The caller's input is malformed; nothing was written."""


class DataDirLockedError(KGError):
    """Another process owns the embedded data directory."""


class StoreUnavailableError(KGError):
    """The graph server cannot be started or reached."""


class ExtractionError(KGError):
    """The LLM step failed; the episode is recorded as failed (retryable), no facts written."""


class StoreError(KGError):
    """The graph server refused a query; the write plan was not applied."""
