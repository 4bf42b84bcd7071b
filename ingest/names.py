"""Exact entity resolution: two names are the same entity when their keys are equal."""

from __future__ import annotations

from kg.schemas.validation import name_key

__all__ = ["name_key"]
