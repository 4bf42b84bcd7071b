"""Exact entity resolution: two names are the same entity when their keys are equal."""

from __future__ import annotations

import unicodedata


def name_key(name: str) -> str:
    """NFKC, case-folded, whitespace collapsed: 'Ｓeoul ', 'seoul' and 'SEOUL' share a key."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())
