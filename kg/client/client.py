"""`AsyncClient`: `KG`'s methods over the HTTP API of a `kg serve`, with `KG`'s arguments;
reads return the server's JSON shapes (kg.schemas.views: `FactView`, `HitView`...), which
have the fields an application reads (`f.object`, `f.valid_to`), so moving an application
from the embedded engine to a server is one line:

```
async with await KG.open() as kg:                                   # embedded
async with AsyncClient("http://127.0.0.1:8321", key=KEY) as kg:     # kg serve
```

The key decides the group: a `group_id` argument other than the key's is refused (422
shape: `InputError`). What the HTTP API does not offer (replay, Graphiti adoption, import,
communities, a search `config`, idempotency keys) is not here or is refused by name.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from kg.client import bodies
from kg.client.answers import Entity, EpisodeInfo, SearchAnswer, WhyAnswer
from kg.client.bodies import episode_body, not_offered, search_body
from kg.client.transport import Session, iso
from kg.erasure import ErasureReceipt
from kg.errors import ExtractionError, InputError
from kg.pipeline import BulkResult, EpisodeResult
from kg.retrieval.request import SearchRequest
from kg.review import ReviewItem
from kg.rollback import RollbackReport
from kg.schemas.answers import QuarantineEntry
from kg.schemas.episode import Channel, Episode, StructuredFact, TrustTier
from kg.schemas.graph import AuditEvent
from kg.schemas.keys import Role
from kg.schemas.metrics import Metrics
from kg.schemas.store import StoreStats
from kg.schemas.timeparse import parse_time
from kg.schemas.views import FactView

__all__ = ["AsyncClient", "Whoami"]


class Whoami(BaseModel):
    """The group, role and channel the client's key is bound to (`GET /v1/whoami`)."""

    group_id: str
    role: Role
    key_id: str
    channel: Channel


class _Stats(BaseModel):
    stats: StoreStats
    metrics: Metrics


class _LogEvent(BaseModel):
    uuid: str
    kind: str
    created_at: datetime
    episodes: list[str] = []
    detail: str = ""
    counts: dict[str, int] | None = None

    def event(self, group_id: str) -> AuditEvent:
        """As `KG.log` returns it: a rollback's or erasure's counts as the JSON detail."""
        detail = json.dumps(self.counts) if self.counts is not None else self.detail
        return AuditEvent.model_validate(
            {**self.model_dump(exclude={"counts"}), "group_id": group_id, "detail": detail}
        )


class AsyncClient:
    """The HTTP API of a `kg serve`, as `KG`'s methods.

    Args:
        url: The server, e.g. "http://127.0.0.1:8321".
        key: An API key from `kg keys create` (default: the KG_API_KEY environment variable).
        timeout: Seconds for one request.
        rate_limit_wait: Seconds of Retry-After a call may wait out in all when the server
            answers 429; past that the call raises `RateLimitedError` (0: never wait).
        page_size: Items a list asks for per request (at most 1000, the server's page).
    """

    def __init__(
        self,
        url: str,
        key: str | None = None,
        *,
        timeout: float = 60.0,
        rate_limit_wait: float = 10.0,
        page_size: int = 1000,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        key = key if key is not None else os.environ.get("KG_API_KEY")
        self.session = Session(
            url,
            key,
            timeout=timeout,
            rate_limit_wait=rate_limit_wait,
            page_size=page_size,
            transport=transport,
        )
        self._whoami: Whoami | None = None

    @classmethod
    async def open(cls, url: str, key: str | None = None, **options: Any) -> Self:
        """A client whose key has been checked (`whoami`): a wrong key or URL fails here."""
        client = cls(url, key, **options)
        try:
            await client.whoami()
        except BaseException:
            await client.close()
            raise
        return client

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self.session.close()

    # -- the key and its group -------------------------------------------------------------

    async def whoami(self) -> Whoami:
        found = self._whoami
        if found is None:
            found = await self.session.get("/v1/whoami", Whoami)
            self._whoami = found
        return found

    async def _group(self, group_id: str | None) -> str:
        """The key's group; a `group_id` naming another one is refused, never ignored."""
        mine = (await self.whoami()).group_id
        if group_id is not None and group_id != mine:
            raise InputError(
                f"group_id {group_id!r}: this client's key is bound to group {mine!r}; "
                "use a key of that group"
            )
        return mine

    async def groups(self) -> list[str]:
        return [await self._group(None)]

    async def health(self) -> dict[str, Any]:
        """`GET /health`: the server is up and holds its store (no key needed)."""
        found: dict[str, Any] = await self.session.get("/health", dict)
        return found

    # -- writes ---------------------------------------------------------------------------

    async def add_episode(
        self,
        episode: Episode | None = None,
        /,
        *,
        source: str | None = None,
        reference_time: datetime | str | None = None,
        content: str | None = None,
        facts: Sequence[StructuredFact | Mapping[str, Any]] | None = None,
        group_id: str | None = None,
        channel: Channel | str | None = None,
        trust: TrustTier | int | str | None = None,
        source_description: str | None = None,
        name: str | None = None,
        session_id: str | None = None,
        turns: tuple[int, int] | None = None,
        extract: bool = True,
        wait: bool = True,
        after_seconds: float | None = None,
    ) -> EpisodeResult:
        """`KG.add_episode` over `POST /v1/episodes` (see it for the arguments). The
        channel defaults to the key's; `reference_time` to now. `session_id` / `turns` and
        `after_seconds` are refused: the HTTP API does not take them."""
        if after_seconds is not None:
            raise not_offered("a session debounce", "after_seconds")
        if isinstance(reference_time, str):
            reference_time = parse_time(reference_time, field="reference_time")
        given = {
            "source": source,
            "reference_time": reference_time,
            "content": content,
            "facts": facts,
            "channel": channel,
            "trust": trust,
            "name": name,
            "source_description": source_description,
            "session_id": session_id,
            "turns": turns,
        }
        fields = {k: v for k, v in given.items() if v is not None}
        if episode is None:
            fields.setdefault("reference_time", datetime.now(UTC))
            episode = bodies.episode(fields, "invalid episode")
        elif fields:
            raise TypeError("pass either an Episode or keyword fields, not both")
        group = episode.group_id if "group_id" in episode.model_fields_set else group_id
        await self._group(group)
        body = episode_body(episode, extract=extract, wait=wait)
        return await self.session.post("/v1/episodes", EpisodeResult, body)

    async def add_episodes(
        self,
        episodes: Iterable[Episode | Mapping[str, Any]],
        *,
        concurrency: int = 4,
        extract: bool = True,
        wait: bool = True,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> BulkResult:
        """`KG.add_episodes`: every episode checked before the first is sent, then sent one
        at a time in reference-time order (the key's one group has one writer); a failed
        extraction is counted in `failed` (re-running retries it), any other error stops."""
        if not 1 <= concurrency <= 64:
            raise InputError(f"concurrency must be in 1..64, got {concurrency}")
        checked: list[Episode] = []
        for i, item in enumerate(episodes):
            where = f"episodes[{i}]"
            ep = item if isinstance(item, Episode) else bodies.episode(dict(item), where)
            episode_body(ep, extract=extract, wait=wait)  # refuses what HTTP does not take
            checked.append(ep)
        for ep in checked:
            await self._group(ep.group_id if "group_id" in ep.model_fields_set else None)
        order = sorted(range(len(checked)), key=lambda i: checked[i].reference_time)
        results: dict[int, EpisodeResult] = {}
        failed: list[str] = []
        for done, i in enumerate(order, start=1):
            try:
                results[i] = await self.add_episode(checked[i], extract=extract, wait=wait)
            except ExtractionError as exc:
                failed.append(f"episodes[{i}]: {exc}")
            if on_progress is not None:
                on_progress(done, len(checked))
        return BulkResult(results=[results[i] for i in sorted(results)], failed=failed)

    async def correct(
        self,
        fact_id: str,
        object: str,
        *,
        valid_at: datetime | str,
        source_description: str = "correction",
    ) -> EpisodeResult:
        """'That changed' (`POST /v1/facts/{id}/correct`): the right value and since when,
        stored as a structured episode that closes the old value by the timeline rules."""
        body = {
            "object": object,
            "valid_at": iso("valid_at", valid_at),
            "source_description": source_description,
        }
        return await self.session.post(f"/v1/facts/{_seg(fact_id)}/correct", EpisodeResult, body)

    async def retry(self, episode_id: str) -> EpisodeResult:
        """Extract a failed episode again (`POST /v1/episodes/{id}/retry`)."""
        return await self.session.post(f"/v1/episodes/{_seg(episode_id)}/retry", EpisodeResult, {})

    async def rollback(
        self,
        episode_ids: str | list[str],
        *,
        group_id: str | None = None,
        apply: bool | None = None,
        dry_run: bool | None = None,
    ) -> RollbackReport:
        """`KG.rollback`: a plan unless `apply=True` (or `dry_run=False`); applying needs
        an admin key."""
        await self._group(group_id)
        ids = [episode_ids] if isinstance(episode_ids, str) else list(episode_ids)
        if not ids:
            raise InputError("rollback needs at least one episode id")
        body = {"episode_ids": ids, "dry_run": _dry_run(apply, dry_run)}
        return await self.session.post("/v1/rollback", RollbackReport, body)

    async def rollback_source(
        self,
        source_description: str,
        *,
        since: datetime | str | None = None,
        group_id: str | None = None,
        apply: bool | None = None,
        dry_run: bool | None = None,
    ) -> RollbackReport:
        """`KG.rollback_source`: every episode from one source, optionally since a time."""
        await self._group(group_id)
        body = {
            "source_description": source_description,
            "since": iso("since", since),
            "dry_run": _dry_run(apply, dry_run),
        }
        body = {k: v for k, v in body.items() if v is not None}
        return await self.session.post("/v1/rollback", RollbackReport, body)

    async def erase_entity(
        self,
        subject: str | None = None,
        *,
        name: str | None = None,
        group_id: str | None = None,
        dry_run: bool = False,
        keep_others: bool = False,
    ) -> ErasureReceipt:
        """`KG.erase_entity` (admin key): physically delete a subject; not undoable.
        `name=` is the subject's older keyword."""
        if (subject is None) == (name is None):
            raise TypeError("erase_entity takes the subject once (subject=, or name=)")
        name = subject if subject is not None else name
        assert name is not None
        await self._group(group_id)
        body = {"subject": name, "confirm": name, "dry_run": dry_run, "keep_others": keep_others}
        return await self.session.post("/v1/erase/entity", ErasureReceipt, body)

    async def erase_group(self, group_id: str) -> ErasureReceipt:
        """`KG.erase_group` (admin key): the key's whole group, which `group_id` must name."""
        return await self.session.post("/v1/erase/group", ErasureReceipt, {"confirm": group_id})

    # -- reads ----------------------------------------------------------------------------

    async def facts(
        self,
        *,
        group_id: str | None = None,
        subject: str | None = None,
        predicate: str | None = None,
        object: str | None = None,
        valid_at: datetime | str | None = None,
        known_at: datetime | str | None = None,
        include_contested: bool = False,
        limit: int = 1000,
    ) -> list[FactView]:
        """`KG.facts`: true at `valid_at` (default now), as known at `known_at` (default now)."""
        return [f async for f in self.iter_facts(**_args(locals()))]

    async def iter_facts(
        self,
        *,
        group_id: str | None = None,
        subject: str | None = None,
        predicate: str | None = None,
        object: str | None = None,
        valid_at: datetime | str | None = None,
        known_at: datetime | str | None = None,
        include_contested: bool = False,
        limit: int | None = None,
    ) -> AsyncIterator[FactView]:
        """`facts`, page by page as they arrive (every page reads the same moment)."""
        await self._group(group_id)
        query = {
            "subject": subject,
            "predicate": predicate,
            "object": object,
            "valid_at": iso("valid_at", valid_at),
            "known_at": iso("known_at", known_at),
            "include_contested": include_contested or None,
        }
        async for fact in self.session.items("/v1/facts", FactView, _limit(limit), **query):
            yield fact

    async def history(
        self,
        *,
        group_id: str | None = None,
        subject: str | None = None,
        predicate: str | None = None,
        object: str | None = None,
        limit: int = 1000,
    ) -> list[FactView]:
        """`KG.history`: every version of the matching facts, closed ones included."""
        return [f async for f in self.iter_history(**_args(locals()))]

    async def iter_history(
        self,
        *,
        group_id: str | None = None,
        subject: str | None = None,
        predicate: str | None = None,
        object: str | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[FactView]:
        await self._group(group_id)
        query = {"subject": subject, "predicate": predicate, "object": object}
        async for fact in self.session.items("/v1/history", FactView, _limit(limit), **query):
            yield fact

    async def why(self, fact_id: str, *, group_id: str | None = None) -> WhyAnswer:
        """`KG.why`: every version of a fact and the episodes behind it, as views."""
        await self._group(group_id)
        return await self.session.get(f"/v1/facts/{_seg(fact_id)}/why", WhyAnswer)

    async def entities(
        self, *, group_id: str | None = None, contains: str = "", limit: int = 100
    ) -> list[Entity]:
        """`KG.entities`: names containing `contains`, the most-described first."""
        await self._group(group_id)
        found = self.session.items("/v1/entities", Entity, _limit(limit), q=contains)
        return [e async for e in found]

    async def episodes(self, *, limit: int | None = None) -> AsyncIterator[EpisodeInfo]:
        """The key's group's episodes, newest first, whatever their status."""
        async for ep in self.session.items("/v1/episodes", EpisodeInfo, _limit(limit)):
            yield ep

    async def episode(self, episode_id: str) -> EpisodeInfo:
        """One episode, with its content, status and metrics."""
        return await self.session.get(f"/v1/episodes/{_seg(episode_id)}", EpisodeInfo)

    async def log(
        self, *, group_id: str | None = None, limit: int = 100, closures: bool = True
    ) -> list[AuditEvent]:
        """`KG.log`: rollbacks, erasures and closures, newest first."""
        group = await self._group(group_id)
        found = self.session.items("/v1/log", _LogEvent, _limit(limit), closures=closures)
        return [e.event(group) async for e in found]

    async def stats(self, group_id: str | None = None) -> StoreStats:
        await self._group(group_id)
        return (await self.session.get("/v1/stats", _Stats)).stats

    async def metrics(self, group_id: str | None = None) -> Metrics:
        await self._group(group_id)
        return await self.session.get("/v1/metrics", Metrics)

    async def quarantine(self, group_id: str | None = None) -> list[QuarantineEntry]:
        """`KG.quarantine`: what the instruction guard held back, oldest first."""
        await self._group(group_id)
        found = [q async for q in self.session.items("/v1/quarantine", QuarantineEntry)]
        return sorted(found, key=lambda q: q.created_at)

    async def review(self, *, group_id: str | None = None, limit: int = 200) -> list[ReviewItem]:
        """`KG.review`: what kg holds back rather than believes, each with why (contested
        claims, then quarantined items not yet decided; up to `limit` of each)."""
        await self._group(group_id)
        found = [i async for i in self.session.items("/v1/review", ReviewItem)]
        kinds = ("contested", "quarantined")
        return [i for kind in kinds for i in [i for i in found if i.kind == kind][:limit]]

    def export_lines(
        self, group_id: str | None = None, *, embeddings: bool = True
    ) -> AsyncIterator[str]:
        """`KG.export_lines` (admin key): the group as JSON Lines, streamed."""
        return self._export(group_id, embeddings)

    async def _export(self, group_id: str | None, embeddings: bool) -> AsyncIterator[str]:
        await self._group(group_id)
        async for line in self.session.lines("/v1/export", embeddings=embeddings):
            yield line

    # -- search ---------------------------------------------------------------------------

    async def search(
        self,
        query: str | SearchRequest,
        *,
        group_id: str | None = None,
        recipe: str | None = None,
        limit: int | None = None,
        valid_at: datetime | str | None = None,
        known_at: datetime | str | None = None,
        include_closed: bool = False,
        include_history: bool | None = None,
        include_contested: bool = False,
        center: str | None = None,
        min_score: float | None = None,
        abstain_below: float | None = None,
        abstain_joint_below: float | None = None,
        asked_at: datetime | str | None = None,
        config: Any = None,
        seeds: list[str] | None = None,
    ) -> SearchAnswer:
        """`KG.search` over `POST /v1/search`: the hits as `HitView`s, best first; a
        `config` or `seeds` is refused (the server takes named recipes)."""
        await self._group(group_id)
        body = search_body(query, locals())
        return await self.session.post("/v1/search", SearchAnswer, body)

    async def context(
        self,
        query: str | SearchRequest,
        *,
        max_tokens: int = 1000,
        group_id: str | None = None,
        recipe: str | None = None,
        limit: int | None = None,
        valid_at: datetime | str | None = None,
        known_at: datetime | str | None = None,
        include_closed: bool = False,
        include_history: bool | None = None,
        include_contested: bool = False,
        center: str | None = None,
        min_score: float | None = None,
        abstain_below: float | None = None,
        abstain_joint_below: float | None = None,
        asked_at: datetime | str | None = None,
        config: Any = None,
        seeds: list[str] | None = None,
    ) -> str:
        """`KG.context`: `search`, rendered as a quoted-data block within `max_tokens`."""
        await self._group(group_id)
        body = {**search_body(query, locals()), "max_tokens": max_tokens}
        found: dict[str, str] = await self.session.post("/v1/context", dict, body)
        return found["context"]


def _seg(ident: str) -> str:
    """An id as one path segment: a '/' or '?' in it cannot reach another route."""
    if not ident or not ident.strip():
        raise InputError("an id is needed")
    return quote(ident, safe="")


def _limit(limit: int | None) -> int | None:
    if limit is not None and limit < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    return limit


def _args(local: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in local.items() if k != "self"}


def _dry_run(apply: bool | None, dry_run: bool | None) -> bool:
    """`dry_run` is the shared name; `apply` the old one (`KG.rollback(apply=True)`)."""
    if apply is not None and dry_run is not None and apply == dry_run:
        raise InputError("apply and dry_run disagree; give dry_run only")
    if dry_run is not None:
        return dry_run
    return not apply
