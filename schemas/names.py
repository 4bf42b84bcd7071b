"""One name per concept on every surface (Python keywords, CLI flags, HTTP fields, MCP
arguments), and the old names that keep working for one release with a deprecation note.

    valid time of a read      valid_at          (CLI --valid-at; `kg as-of WHEN` stays)
    transaction time          known_at
    include closed facts      include_closed    (was include_history, CLI --history)
    include contested facts   include_contested (was CLI --contested)
    the entity a read or an   subject           (was erase_entity(name=), kg erase --entity,
    erasure is about                             HTTP {"name"}, MCP forget(entity))
    preview instead of doing  dry_run           (Python: was apply=False)
    episode time              reference_time    (default now)
    queue instead of writing  wait              (CLI --wait/--no-wait; was kg ingest --background)
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

# The one name of each concept, and the other names it had (or that one might give it) on
# some surface. tests/test_names.py walks the CLI's options (the server's tests the OpenAPI
# document and the MCP tools) and fails where a visible name is one of the others. HTTP's
# {"name"} of an erasure is left out: "name" is also an episode's and a key's own field.
CONCEPTS: dict[str, tuple[str, ...]] = {
    "valid_at": ("as_of", "valid_time"),
    "known_at": ("as_known_at", "known_time", "transaction_time"),
    "include_closed": ("include_history", "history"),
    "include_contested": ("contested",),
    "subject": ("entity",),
    "dry_run": ("preview", "plan_only"),
    "reference_time": ("ref_time", "occurred_at"),
    "wait": ("background",),
}
OTHER_NAMES: dict[str, str] = {old: new for new, olds in CONCEPTS.items() for old in olds}


def deprecated(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn (DeprecationWarning) that `old` is now `new`; it still works for one release."""
    warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=stacklevel)


def renamed_fields(data: Any, renames: Mapping[str, str]) -> Any:
    """`data` (a mapping of fields) with each old field of `renames` moved to its new name,
    warning once per old name; an old and a new name both given must agree."""
    if not isinstance(data, Mapping) or not any(old in data for old in renames):
        return data
    out = dict(data)
    for old, new in renames.items():
        if old not in out:
            continue
        value = out.pop(old)
        deprecated(old, new, stacklevel=4)
        if new in out and out[new] != value:
            raise ValueError(f"{old} is the deprecated name of {new}: give {new} only")
        out[new] = value
    return out
