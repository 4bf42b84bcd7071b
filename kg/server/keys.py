"""API keys: `kg_<key_id>_<secret>`, a random secret shown once; the store keeps its SHA-256.

The key id is public (it names the key in `kg keys list` and in revocations, never the
secret); lookups go by id and the hash is compared in constant time. Nothing here logs a key.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from kg.errors import InputError
from kg.schemas.episode import Channel, TrustTier
from kg.schemas.keys import ApiKeyRecord, Role
from kg.schemas.store import KeyStore
from kg.schemas.validation import check_group_id

KEY_RE = re.compile(r"^kg_([a-z0-9]{12})_([A-Za-z0-9_-]{43})$")
# A key, or any prefix of one long enough to matter, anywhere in a text.
_KEY_IN_TEXT = re.compile(r"kg_[a-z0-9]{12}_[A-Za-z0-9_-]{6,}")
MASKED_KEY = "kg_[redacted]"
_DUMMY_HASH = "0" * 64


@dataclass(frozen=True)
class Principal:
    """Who is calling: the group every operation is scoped to, what they may do there, and
    the channel their writes are stored on (the ceiling of the trust they may claim)."""

    key_id: str
    group_id: str
    role: Role
    channel: Channel

    @property
    def ceiling(self) -> TrustTier:
        return TrustTier.for_channel(self.channel)


def redact_keys(text: str) -> str:
    """`text` with anything shaped like a key masked: for messages built from caller input
    (a key pasted as an id) and for log lines."""
    return _KEY_IN_TEXT.sub(MASKED_KEY, text)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> tuple[str, str]:
    """A fresh (key_id, key): 12 lowercase base-36 characters of id, 256 bits of secret."""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    key_id = "".join(secrets.choice(alphabet) for _ in range(12))
    return key_id, f"kg_{key_id}_{secrets.token_urlsafe(32)}"


async def create_key(
    store: KeyStore,
    group_id: str,
    role: Role | str,
    name: str = "",
    channel: Channel | str = Channel.agent,
) -> tuple[ApiKeyRecord, str]:
    """Store a new key for `group_id`; returns its record and the key (shown once). Its
    writes are stored on `channel` and claim at most its trust tier (default: agent, the
    lowest: a key that relays what users state says so with `channel='user'`)."""
    try:
        check_group_id(group_id)
        role = Role(role)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    try:
        channel = Channel(channel)
    except ValueError:
        names = ", ".join(c.value for c in Channel)
        raise InputError(f"unknown channel {channel!r}; use one of {names}") from None
    if len(name) > 200:
        raise InputError(f"key name is {len(name)} characters long; the limit is 200")
    key_id, key = new_key()
    record = ApiKeyRecord(
        key_id=key_id,
        key_hash=key_hash(key),
        scope=group_id,
        role=role,
        channel=channel,
        name=name,
        created_at=datetime.now(UTC),
    )
    await store.put_key(record)
    return record, key


async def revoke_key(store: KeyStore, key_id: str) -> ApiKeyRecord:
    record = await store.revoke_key(key_id, datetime.now(UTC))
    if record is None:
        raise InputError(f"no key {key_id!r}")
    return record


async def authenticate(store: KeyStore, key: str) -> Principal | None:
    """The principal a presented key stands for, or None (malformed, unknown or revoked)."""
    m = KEY_RE.match(key)
    record = await store.key(m.group(1)) if m else None
    expected = record.key_hash if record is not None else _DUMMY_HASH
    ok = hmac.compare_digest(expected, key_hash(key))  # compared even when there is no record
    if record is None or not ok or record.revoked_at is not None:
        return None
    return Principal(
        key_id=record.key_id, group_id=record.scope, role=record.role, channel=record.channel
    )
