"""Every operation the server offers, scoped to the caller's group and checked against its
role. The HTTP routes and the MCP tools both call this, so they cannot disagree: the group
always comes from the `Principal` (the key), never from the request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from datetime import UTC, datetime
from typing import Any, TypeVar

from kg.erasure import ErasureReceipt
from kg.errors import InputError, KGError, NotFoundError
from kg.facade import KG, EpisodeResult, Explanation, QuarantineEntry
from kg.ingest.structured import stored_facts
from kg.retrieval import SearchResults
from kg.review import REVIEWED, ReviewItem, decision, find_item
from kg.rollback import RollbackReport
from kg.schemas.episode import Channel, Episode, EpisodeSource, StructuredFact, TrustTier
from kg.schemas.graph import AuditEvent, EpisodeStatus, EpisodicNode, Fact
from kg.schemas.keys import Role
from kg.schemas.metrics import Metrics
from kg.schemas.store import EntitySummary, PageAfter
from kg.schemas.validation import name_key
from kg.schemas.views import fact_view
from kg.server.keys import Principal
from kg.server.models import (
    AddEpisode,
    ContextRequest,
    Correction,
    Decision,
    EpisodeDetail,
    EraseEntityRequest,
    EraseGroupRequest,
    FactsFilter,
    FactsQuery,
    HistoryFilter,
    HistoryQuery,
    RollbackRequest,
    SearchRequest,
    Statement,
    StatsResponse,
    WhyResponse,
)
from kg.server.pages import Page, read_offset_page, read_page

T = TypeVar("T")


class ForbiddenError(KGError):
    """The key's role does not allow this in its own group (answered 403)."""


class Writes:
    """Writes run as tasks of their own, shielded from the request: a client that hangs up,
    or a shutdown that cancels handlers, never stops a write halfway; `drain` waits for all."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed = False

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self.closed:
            coro.close()
            raise ShuttingDownError("the server is shutting down; try again shortly")
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(task)

    async def drain(self) -> int:
        """Refuse new writes and wait for those in flight; returns how many there were."""
        self.closed = True
        pending = list(self._tasks)
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        return len(pending)


class ShuttingDownError(KGError):
    """A write arrived after shutdown began (answered 503)."""


class Memory:
    """The one KG a server process holds, and its in-flight writes."""

    def __init__(self, kg: KG) -> None:
        self.kg = kg
        self.writes = Writes()

    def scoped(self, principal: Principal) -> Scoped:
        return Scoped(self, principal)


class Scoped:
    """The operations of one caller: group and role fixed by its key."""

    def __init__(self, memory: Memory, principal: Principal) -> None:
        self.memory = memory
        self.kg = memory.kg
        self.principal = principal
        self.group = principal.group_id

    def need(self, role: Role, what: str) -> None:
        if not self.principal.role.allows(role):
            raise ForbiddenError(
                f"{what} needs a key with the {role.value!r} role; this key has "
                f"{self.principal.role.value!r}"
            )

    def claim(self, channel: Channel | None, trust: TrustTier | None) -> tuple[Channel, TrustTier]:
        """The channel and trust a write is stored at: what the request names, else the
        key's channel; never above the key's ceiling (the credential decides, not the body)."""
        p = self.principal
        channel = channel if channel is not None else p.channel
        tier = trust if trust is not None else TrustTier.for_channel(channel)
        if tier > p.ceiling:
            raise ForbiddenError(
                f"this key writes at most at trust {p.ceiling.name!r} (its channel is "
                f"{p.channel.value!r}); the request claims channel {channel.value!r} at trust "
                f"{tier.name!r} (a key for more: kg keys create --channel ...)"
            )
        return channel, tier

    # -- writes ---------------------------------------------------------------------------

    async def add(self, req: AddEpisode) -> EpisodeResult:
        self.need(Role.write, "adding an episode")
        extract = req.extract if req.extract is not None else self.kg.llm is not None
        fields = req.model_dump(exclude={"extract", "wait"}, exclude_none=True)
        fields["channel"], fields["trust"] = self.claim(req.channel, req.trust)
        fields["group_id"] = self.group
        fields.setdefault("reference_time", datetime.now(UTC))
        try:
            episode = Episode.model_validate(fields)
        except ValueError as exc:  # the episode's own rules (payload, intervals)
            raise InputError(f"invalid episode: {_one_line(exc)}") from None
        self.kg.check_episode(episode, extract=extract, queued=not req.wait)
        return await self.memory.writes.run(
            self.kg.add_episode(episode, extract=extract, wait=req.wait)
        )

    async def retry(self, episode_id: str) -> EpisodeResult:
        """Extract a failed episode again, from what was stored of it (same content, times,
        source and trust: the same content hash, so the failed record is replaced)."""
        self.need(Role.write, "retrying an episode")
        node = await self.episode(episode_id)
        if node.status is not EpisodeStatus.failed:
            raise InputError(
                f"episode {episode_id!r} is {node.status.value}, not failed; nothing to retry"
            )
        self.claim(node.channel, node.trust)  # a retry writes at the episode's own trust
        episode = Episode(
            group_id=self.group,
            source=node.source,
            reference_time=node.valid_at,
            name=node.name,
            content=node.content,
            source_description=node.source_description,
            channel=node.channel,
            trust=node.trust,
        )
        self.kg.check_episode(episode, extract=True)
        return await self.memory.writes.run(self.kg.add_episode(episode, extract=True))

    async def correct(self, fact_id: str, req: Correction) -> EpisodeResult:
        """'That changed': a structured episode on the key's channel stating the right value
        from `valid_at`; the timeline closes the old value (never an overwrite) when the
        key's trust reaches it. For a multi-valued predicate the old value is also restated
        as ending then."""
        self.need(Role.write, "correcting a fact")
        versions = (await self.kg.why(fact_id, group_id=self.group)).versions
        believed = [v for v in versions if v.edge.expired_at is None]
        if not believed:
            raise InputError(f"fact {fact_id!r} is no longer believed; nothing to correct")
        old = max(believed, key=lambda v: v.edge.created_at)
        if name_key(req.object) == name_key(old.object):
            raise InputError(f"{old.object!r} is already the value; nothing to correct")
        said = [
            StructuredFact(
                subject=old.subject,
                predicate=old.predicate,
                object=req.object,
                valid_at=req.valid_at,
            )
        ]
        single = self.kg.ontology.resolve_predicate(old.predicate).single_valued
        ends = old.edge.invalid_at
        if not single and (ends is None or ends > req.valid_at):
            if req.valid_at <= old.edge.valid_at:
                raise InputError(
                    f"{old.predicate} holds several values: a correction that ends "
                    f"{old.object!r} must start after it began ({old.edge.valid_at.isoformat()}); "
                    "to remove it as never true, roll back its episode"
                )
            said.append(
                StructuredFact(
                    subject=old.subject,
                    predicate=old.predicate,
                    object=old.object,
                    valid_at=old.edge.valid_at,
                    invalid_at=req.valid_at,
                )
            )
        episode = Episode(
            group_id=self.group,
            source=EpisodeSource.facts,
            reference_time=datetime.now(UTC),
            name=f"correction: {old.subject} {old.predicate} {req.object}",
            facts=said,
            source_description=req.source_description,
            channel=self.principal.channel,
        )
        self.kg.check_episode(episode, extract=False)
        return await self.memory.writes.run(self.kg.add_episode(episode, extract=False))

    async def decide(self, item_id: str, req: Decision) -> EpisodeResult:
        """A person's answer to a review item: a user-channel episode (the key must write at
        user trust) naming the item, which the timeline rules apply like any statement."""
        self.need(Role.write, "deciding a review item")
        item = await find_item(self.kg.store, self.group, item_id)
        channel, trust = self.claim(Channel.user, None)
        said = decision(item, req.action, req.object)
        shown = f"{item.said.subject} {item.said.predicate} {item.said.object}" if item.said else ""
        verb = {"accept": "accepted", "reject": "rejected", "edit": "edited"}[req.action]
        fields: dict[str, Any] = {
            "group_id": self.group,
            "reference_time": datetime.now(UTC),
            "name": f"review: {verb} {shown or item.kind + ' passage'}"[:200],
            "source_description": REVIEWED + item.id,
            "channel": channel,
            "trust": trust,
        }
        if said:
            episode = Episode(source=EpisodeSource.facts, facts=said, **fields)
        else:  # a rejected quarantined item: a note, without the text the guard held back
            note = f"Reviewed quarantined item {item.id}: rejected; it stays out of memory."
            episode = Episode(source=EpisodeSource.text, content=note, **fields)
        self.kg.check_episode(episode, extract=False)
        return await self.memory.writes.run(self.kg.add_episode(episode, extract=False))

    async def rollback(self, req: RollbackRequest) -> RollbackReport:
        apply = not req.dry_run
        if apply:
            self.need(Role.admin, "applying a rollback")
        if bool(req.episode_ids) == (req.source_description is not None):
            raise InputError("give episode_ids or source_description, not both and not neither")
        if req.since is not None and req.source_description is None:
            raise InputError("since goes with source_description")
        if req.source_description is not None:
            work = self.kg.rollback_source(
                req.source_description,
                since=req.since,
                group_id=self.group,
                dry_run=not apply,
            )
        else:
            work = self.kg.rollback(req.episode_ids, group_id=self.group, dry_run=not apply)
        if not apply:
            return await work
        return await self.memory.writes.run(work)

    async def erase_entity(self, req: EraseEntityRequest) -> ErasureReceipt:
        self.need(Role.admin, "erasing a subject")
        if not req.dry_run and req.confirm != req.subject:
            raise InputError("confirm must repeat the subject being erased; nothing erased")
        work = self.kg.erase_entity(
            req.subject, group_id=self.group, dry_run=req.dry_run, keep_others=req.keep_others
        )
        return await (work if req.dry_run else self.memory.writes.run(work))

    async def erase_group(self, req: EraseGroupRequest) -> ErasureReceipt:
        self.need(Role.admin, "erasing the group")
        if req.confirm != self.group:
            raise InputError("confirm must be this key's group id; nothing erased")
        return await self.memory.writes.run(self.kg.erase_group(self.group))

    def export(self, *, embeddings: bool) -> AsyncIterator[str]:
        self.need(Role.admin, "exporting the group")
        return self.kg.export_lines(self.group, embeddings=embeddings)

    # -- reads ----------------------------------------------------------------------------

    async def facts(self, q: FactsQuery) -> list[Fact]:
        return await self.kg.facts(group_id=self.group, **q.model_dump())

    async def history(self, q: HistoryQuery) -> list[Fact]:
        return await self.kg.history(group_id=self.group, **q.model_dump())

    async def fact_page(self, q: FactsFilter, *, limit: int, cursor: str | None) -> Page[Fact]:
        """A page of `facts`; the view's defaults ("now") are the first page's, for every page."""

        async def read(n: int, at: datetime | None) -> list[Fact]:
            fields = q.model_dump(include=set(FactsFilter.model_fields))
            fields["valid_at"] = fields["valid_at"] or at
            fields["known_at"] = fields["known_at"] or at
            return await self.kg.facts(group_id=self.group, limit=n, **fields)

        now = self.kg.clock.now()
        return await read_offset_page("facts", limit, cursor, read, most=10_000, now=now)

    async def history_page(self, q: HistoryFilter, *, limit: int, cursor: str | None) -> Page[Fact]:
        async def read(n: int, _: datetime | None) -> list[Fact]:
            fields = q.model_dump(include=set(HistoryFilter.model_fields))
            return await self.kg.history(group_id=self.group, limit=n, **fields)

        return await read_offset_page("history", limit, cursor, read, most=100_000)

    async def entity_page(
        self, *, contains: str, limit: int, cursor: str | None
    ) -> Page[EntitySummary]:
        async def read(n: int, _: datetime | None) -> list[EntitySummary]:
            return await self.entities(contains=contains, limit=n)

        return await read_offset_page("entities", limit, cursor, read, most=10_000)

    async def log_page(self, *, closures: bool, limit: int, cursor: str | None) -> Page[AuditEvent]:
        async def read(n: int, _: datetime | None) -> list[AuditEvent]:
            return await self.log(limit=n, closures=closures)

        return await read_offset_page("log", limit, cursor, read, most=10_000)

    async def search(self, req: SearchRequest) -> SearchResults:
        return await self.kg.search(req, group_id=self.group)

    async def context(self, req: ContextRequest) -> str:
        return await self.kg.context(req, max_tokens=req.max_tokens, group_id=self.group)

    async def why(self, fact_id: str) -> Explanation:
        return await self.kg.why(fact_id, group_id=self.group)

    async def why_said(self, fact_id: str) -> WhyResponse:
        """`why`, plus what each supporting episode said about the fact."""
        x = await self.why(fact_id)
        by_id = {ep.uuid: ep for ep in x.episodes}
        latest = x.versions[-1]
        statements = []
        for uuid in dict.fromkeys(ep for v in x.versions for ep in v.edge.episodes):
            if uuid in by_id:
                statements += self._said(by_id[uuid], latest)
        return WhyResponse(
            versions=[fact_view(v) for v in x.versions],
            episodes=[EpisodeDetail.of(e) for e in x.episodes],
            statements=statements,
        )

    def _said(self, episode: EpisodicNode, fact: Fact) -> list[Statement]:
        try:
            said = stored_facts(episode)
        except ValueError:  # unextracted text: it said nothing structured
            return []
        keys = {name_key(fact.subject), name_key(fact.object)}

        def about(f: StructuredFact) -> bool:
            try:
                predicate = self.kg.ontology.resolve_predicate(f.predicate).name
            except ValueError:
                return False
            return predicate == fact.predicate and bool(
                {name_key(f.subject), name_key(f.object)} & keys
            )

        text = episode.source is not EpisodeSource.facts
        return [
            Statement(
                episode_id=episode.uuid,
                said=f,
                passage=_passage(episode.content, f.object, f.subject) if text else None,
            )
            for f in said
            if about(f)
        ]

    async def entities(self, *, contains: str, limit: int) -> list[EntitySummary]:
        return await self.kg.entities(group_id=self.group, contains=contains, limit=limit)

    async def log(self, *, limit: int, closures: bool) -> list[AuditEvent]:
        return await self.kg.log(group_id=self.group, limit=limit, closures=closures)

    async def episodes(self, *, limit: int, cursor: str | None = None) -> Page[EpisodicNode]:
        """A page of episodes of every status (failed and rolled back too), newest first."""
        return await read_page(
            "episodes",
            limit,
            cursor,
            lambda n, after: self.kg.store.episode_page(self.group, n, after),
            _episode_key,
        )

    async def episode(self, episode_id: str) -> EpisodicNode:
        episode_id = await self.kg.resolve_id("episode", episode_id, group_id=self.group)
        found = await self.kg.store.episodes(self.group, [episode_id])
        if not found:
            raise NotFoundError(f"no episode {episode_id!r} in group {self.group!r}")
        return found[0]

    async def quarantine(self, *, limit: int, cursor: str | None = None) -> Page[QuarantineEntry]:
        """What the guard held back, a page of episodes at a time (newest first), each
        episode's items in its order."""
        page = await read_page(
            "quarantine",
            limit,
            cursor,
            lambda n, after: self.kg.store.episode_page(self.group, n, after, quarantined=True),
            _episode_key,
        )
        items = [
            QuarantineEntry(
                episode_uuid=ep.uuid,
                created_at=ep.created_at,
                channel=ep.channel,
                source_description=ep.source_description,
                item=q,
            )
            for ep in page.items
            for q in ep.quarantined()
        ]
        return Page[QuarantineEntry](items=items, next_cursor=page.next_cursor)

    async def review(self, *, limit: int, cursor: str | None) -> Page[ReviewItem]:
        async def read(n: int, _: datetime | None) -> list[ReviewItem]:
            return await self.kg.review(group_id=self.group, limit=n)

        return await read_offset_page("review", limit, cursor, read, most=10_000)

    async def stats(self) -> StatsResponse:
        return StatsResponse(stats=await self.kg.stats(self.group), metrics=await self.metrics())

    async def metrics(self) -> Metrics:
        return await self.kg.metrics(self.group)


def _episode_key(episode: EpisodicNode) -> PageAfter:
    return PageAfter(created_at=episode.created_at, uuid=episode.uuid)


def _passage(content: str, *names: str) -> str | None:
    """The first line of `content` that names the first of `names` found (case-insensitive)."""
    lines = [line.strip() for line in content.splitlines() if line.strip()]
    for name in names:
        for line in lines:
            if name.casefold() in line.casefold():
                return line[:500]
    return None


def _one_line(exc: ValueError) -> str:
    from pydantic import ValidationError

    from kg.errors import validation_message

    if isinstance(exc, ValidationError):
        return validation_message(exc)
    return " ".join(str(exc).split())
