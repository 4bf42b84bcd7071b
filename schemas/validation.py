"""Field-level rules shared by the models: group ids, identifiers, text and time hygiene."""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, ValidationError

GROUP_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Labels and predicates end up as Cypher identifiers or indexed names, so they are kept to a
# conservative alphabet instead of being quoted.
TYPE_NAME_RE = re.compile(r"^[A-Z][A-Za-z0-9]{0,63}$")
PREDICATE_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")


def check_group_id(value: str) -> str:
    if not GROUP_ID_RE.match(value):
        raise ValueError(
            f"invalid group_id {value!r}: use 1-64 characters from A-Z, a-z, 0-9, '_' and '-'"
        )
    return value


def check_text(value: str) -> str:
    # A NUL byte truncates FalkorDB's query text; refuse it here rather than store half a string.
    if "\x00" in value:
        raise ValueError("text must not contain NUL (\\x00) characters")
    return value


def check_name(value: str) -> str:
    value = check_text(value).strip()
    if not value:
        raise ValueError("must not be empty or only whitespace")
    if len(value) > 512:
        raise ValueError(f"is {len(value)} characters long; the limit is 512")
    return value


def to_utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


GroupId = Annotated[str, AfterValidator(check_group_id)]
Text = Annotated[str, AfterValidator(check_text)]
Name = Annotated[str, AfterValidator(check_name)]
# Naive datetimes are rejected (AwareDatetime) and everything is normalised to UTC, so that
# lexical order of the stored strings equals time order.
UtcDatetime = Annotated[AwareDatetime, AfterValidator(to_utc)]


def validation_message(exc: ValidationError, limit: int | None = None) -> str:
    """pydantic's errors on one line: 'facts.0.predicate: Field required; ...'."""
    parts = []
    for e in exc.errors()[:limit]:
        loc = ".".join(str(p) for p in e["loc"]) or "input"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


def name_key(name: str) -> str:
    """NFKC, case-folded, whitespace collapsed: full-width 'SEOUL', 'seoul ', 'Seoul' are one."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())
