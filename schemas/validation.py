"""Field-level rules shared by the models: group ids, identifiers, text and time hygiene."""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime
from typing import Annotated

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BeforeValidator,
    ValidationError,
    ValidationInfo,
)

# Anchored with \A and \Z, never ^ and $: '$' also matches before a trailing newline, so
# 'default\n' would pass. Every caller uses fullmatch as well.
GROUP_ID_RE = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")
# Labels and predicates end up as Cypher identifiers or indexed names, so they are kept to a
# conservative alphabet instead of being quoted.
TYPE_NAME_RE = re.compile(r"\A[A-Z][A-Za-z0-9]{0,63}\Z")
PREDICATE_RE = re.compile(r"\A[A-Z][A-Z0-9_]{0,63}\Z")

_SURROGATE = re.compile(r"[\ud800-\udfff]")
# Format characters a name may hold: the joiners Persian, Indic scripts and emoji sequences
# need, emoji tag sequences (subdivision flags) and the visible prepended concatenation marks.
_NAME_FORMAT_OK = frozenset(
    "\u200c\u200d\u0600\u0601\u0602\u0603\u0604\u0605\u06dd\u070f\u0890\u0891\u08e2"
    "\U000110bd\U000110cd"
) | frozenset(map(chr, range(0xE0020, 0xE0080)))
# Letters and symbols that draw nothing: Hangul fillers, the braille blank.
_BLANK = frozenset("\u115f\u1160\u3164\uffa0\u2800")
_VISIBLE = frozenset({"L", "N", "P", "S"})  # categories by first letter: not marks, not C, not Z


def check_group_id(value: str) -> str:
    if not GROUP_ID_RE.fullmatch(value):
        raise ValueError(
            f"invalid group_id {value!r}: use 1-64 characters from A-Z, a-z, 0-9, '_' and '-'"
        )
    return value


def check_text(value: str) -> str:
    # A NUL byte truncates FalkorDB's query text; refuse it here rather than store half a string.
    if "\x00" in value:
        raise ValueError("text must not contain NUL (\\x00) characters")
    # A lone surrogate is not Unicode text (Python makes them of undecodable bytes, e.g. in
    # argv, and of JSON escapes such as "\udc80"); no store can encode it as UTF-8.
    if bad := _SURROGATE.search(value):
        raise ValueError(
            f"text contains a lone surrogate (U+{ord(bad.group()):04X}), which is not valid "
            "Unicode: was it decoded from invalid UTF-8?"
        )
    return value


def _trimmed(value: str) -> str:
    value = check_text(value).strip()
    if not value:
        raise ValueError("must not be empty or only whitespace")
    if len(value) > 512:
        raise ValueError(f"is {len(value)} characters long; the limit is 512")
    return value


def check_name(value: str) -> str:
    """A name is what an entity is known by, so it must be seen to be told apart: surrounding
    whitespace is trimmed; control characters (other than whitespace), invisible format
    characters (zero-width spaces, bidi controls, the BOM, soft hyphens) and names with no
    visible character are refused. Inner whitespace is kept as given (the entity key folds
    it); the joiners ZWNJ and ZWJ are kept, since scripts and emoji need them."""
    value = _trimmed(value)
    if value.isascii() and value.isprintable():
        # Printable ASCII has no control or format character, and a trimmed, non-empty one
        # has a character other than a space, which is a letter, digit, mark or symbol.
        return value
    for ch in value:
        category = unicodedata.category(ch)
        if category == "Cc" and not ch.isspace():
            raise ValueError(f"contains the control character U+{ord(ch):04X}")
        if category == "Cf" and ch not in _NAME_FORMAT_OK:
            raise ValueError(
                f"contains the invisible format character U+{ord(ch):04X} "
                f"({unicodedata.name(ch, 'unnamed')}); names must be seen to be told apart"
            )
    if not any(unicodedata.category(ch)[0] in _VISIBLE and ch not in _BLANK for ch in value):
        raise ValueError(f"{value!r} has no visible character")
    return value


def to_utc(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00+01:00 is in year 0 in UTC
        raise ValueError(
            f"{value.isoformat()} is outside years 1 to 9999 once converted to UTC"
        ) from None


GroupId = Annotated[str, AfterValidator(check_group_id)]
Text = Annotated[str, AfterValidator(check_text)]
# Read back from the store (validation context STORED), a name is held to the rules it was
# written under, so that data stored before a rule was added still replays and rolls back.
STORED = {"stored": True}


def _name(value: str, info: ValidationInfo) -> str:
    stored = isinstance(info.context, dict) and info.context.get("stored")
    return _trimmed(value) if stored else check_name(value)


Name = Annotated[str, AfterValidator(_name)]
NUMBER_RE = re.compile(r"\A\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*\Z")
TIME_HINT = "give an ISO 8601 time or date, e.g. 2024-03-15T09:00:00Z or 2024-03-15"


def no_number_times(value: object) -> object:
    """Times are ISO 8601 text or datetimes, never numbers: pydantic would read 2021 (or
    "2021") as Unix seconds, 1970-01-01T00:33:41Z, silently. Refused at every edge alike
    (JSON bodies, MCP arguments, ingest files, imports, Python callers)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number or (isinstance(value, str) and NUMBER_RE.match(value)):
        raise ValueError(
            f"{value!r} is a number, not a time: {TIME_HINT} (numbers are not read as Unix seconds)"
        )
    return value


# Naive datetimes are rejected (AwareDatetime), numbers too (no_number_times), and everything
# is normalised to UTC, so that lexical order of the stored strings equals time order.
UtcDatetime = Annotated[AwareDatetime, BeforeValidator(no_number_times), AfterValidator(to_utc)]


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
