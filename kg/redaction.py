"""How a subject is named in text: what erasure searches episodes for, and cuts out of the
redacted copies it keeps of them (kg.erasure).

A text names the subject whose name key is `key` when, read under the normalisation the key
uses (NFKC, case folding, whitespace collapsed), it holds the key's words in order and whole,
written apart, hyphenated or joined: "Minji Kim", "MINJI  KIM", "Minji-Kim", "MinjiKim",
"minji_kim", "minji.kim@example.com". Not "Kim Minji" (another order), nor "Minjik Kimchi"
(other words). A JSON text is also read string by string, so that an escaped "\\u00a0" or
"\\n" counts as the character it stands for.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

from kg.ingest.names import name_key

REDACTED = "[erased]"
# Between two words of a name: one space (name_key collapsed the rest), a hyphen, dash,
# underscore, dot or middle dot (spaces around it allowed), or nothing (joined).
_JOIN = r"(?:(?:{space})?[-\u2010-\u2015_.\u00b7](?:{space})?|{space}|)"


def _pattern(key: str, space: str, flags: int = 0) -> re.Pattern[str]:
    join = _JOIN.format(space=space)
    body = join.join(re.escape(w) for w in key.split())
    return re.compile(rf"(?<!\w){body}(?!\w)", flags)


def variant_keys(key: str) -> list[str]:
    """The name keys of the entities that are the subject spelt another way (hyphenated,
    joined, with an underscore or a dot): erasure deletes them with it."""
    words = key.split()
    return list(dict.fromkeys([key] + [sep.join(words) for sep in ("-", "", "_", ".")]))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for k, item in value.items():
            yield k
            yield from _strings(item)


def _texts(text: str) -> Iterator[str]:
    yield text
    try:
        value = json.loads(text)
    except ValueError:
        return
    yield from _strings(value)


def names_subject(text: str, key: str) -> bool:
    """Whether the text names the subject whose name key is `key` (module docstring)."""
    pattern = _pattern(key, " ")
    return any(pattern.search(name_key(t)) for t in _texts(text))


def _redact_value(value: Any, pattern: re.Pattern[str]) -> Any:
    if isinstance(value, str):
        return pattern.sub(REDACTED, unicodedata.normalize("NFKC", value))
    if isinstance(value, list):
        return [_redact_value(v, pattern) for v in value]
    if isinstance(value, dict):
        return {_redact_value(k, pattern): _redact_value(v, pattern) for k, v in value.items()}
    return value


def redact(text: str, key: str, *, as_json: bool = False) -> str | None:
    """The text with every naming of the subject replaced by REDACTED (NFKC-normalised, so
    a full-width spelling is caught too); with `as_json`, each string of the JSON value.
    None when the result would still name it (a spelling the replacement misses): the
    caller keeps no copy then."""
    pattern = _pattern(key, r"\s+", re.IGNORECASE)
    if as_json:
        try:
            out = json.dumps(_redact_value(json.loads(text), pattern), ensure_ascii=False)
        except ValueError:
            out = _redact_value(text, pattern)
    else:
        out = _redact_value(text, pattern)
    return None if names_subject(out, key) else out
