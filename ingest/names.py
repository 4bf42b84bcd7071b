"""Exact entity resolution: two names are the same entity when their keys are equal."""

from __future__ import annotations

import unicodedata


def name_key(name: str) -> str:
    """NFKC, case-folded, whitespace collapsed: full-width 'SEOUL', 'seoul ', 'Seoul' are one."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())
