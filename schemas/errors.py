"""The two error classes the pure layer raises itself: kept here so that `kg.schemas` (the
time parser, the views) can raise the same `InputError` every surface catches, without
importing the layers above it. `kg.errors` re-exports them with the rest."""

from __future__ import annotations


class KGError(Exception):
    """Base class: anything kg raises deliberately."""


class InputError(KGError, ValueError):
    """The caller's input is malformed; nothing was written."""
