"""Content hash that makes re-adding an episode a no-op within its group."""

from __future__ import annotations

import hashlib
import json

from kg.schemas.episode import Episode


def canonical_payload(episode: Episode) -> str:
    """The episode's meaning as canonical JSON: what it says, when, from where, how trusted.

    `name` is a label and is left out; the group is the scope of the hash, not part of it.
    """
    body = {
        "source": episode.source.value,
        "content": episode.content,
        "facts": [f.model_dump(mode="json") for f in episode.facts],
        "reference_time": episode.reference_time.isoformat(),
        "source_description": episode.source_description,
        "channel": episode.channel.value,
        "trust": int(episode.trust_tier),
    }
    return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def content_hash(episode: Episode) -> str:
    return hashlib.sha256(canonical_payload(episode).encode()).hexdigest()
