"""API keys as stored: what a key binds (one group, one role, one channel), never the key.

A key is a random secret shown once at creation; the store keeps its SHA-256 (keys are
high-entropy, so a fast hash is enough: nothing to brute-force) and a public `key_id` that
names it in listings, logs and revocations. Records live in a reserved namespace,
`KEYS_NAMESPACE`, which `check_group_id` can never accept, so no group can read, export or
erase them, and `drop_group` never reaches them.

A key's `channel` is the ceiling of what its writes may claim: they are stored on that
channel unless the request names a lower one, and never at a higher trust tier (the request
body cannot raise it). Records made before keys had a channel read as `agent` (the lowest
tier): the credential, not the body, decides trust, and nothing older may claim more.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from kg.schemas.episode import Channel
from kg.schemas.validation import GroupId, UtcDatetime

KEYS_NAMESPACE = "kg:keys"  # ':' is outside the group id alphabet (see GROUP_ID_RE)


class Role(StrEnum):
    """What a key may do in its group; each role includes the ones before it."""

    read = "read"  # facts, history, search, context, why, log, stats, rollback dry runs
    write = "write"  # + add episodes
    admin = "admin"  # + rollback apply, erase, export

    def allows(self, needed: Role) -> bool:
        order = list(Role)
        return order.index(self) >= order.index(needed)


class ApiKeyRecord(BaseModel):
    key_id: str = Field(pattern=r"^[a-z0-9]{8,32}$", description="Public id of the key.")
    key_hash: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the whole key.")
    scope: GroupId = Field(description="The one group the key reads and writes.")
    role: Role
    channel: Channel = Field(
        default=Channel.agent,
        description="The channel its writes are stored on and the highest trust they may "
        "claim; keys made before channels existed read as 'agent'.",
    )
    name: str = Field(default="", max_length=200, description="A label for people.")
    created_at: UtcDatetime
    revoked_at: UtcDatetime | None = None
