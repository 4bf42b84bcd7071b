"""LangGraph's long-term memory store (`langgraph.store.base.BaseStore`) kept in kg.

The mapping, item by item (docs/adapters.md says what it costs):
- an item `(namespace, key) -> value` is one fact of the wrapped memory's group: subject
  `ns1/ns2/key #<digest of the exact path>` (kg folds case in names; the digest keeps `A` and
  `a` apart), predicate `HAS_VALUE`, object `<digest of the value> (value)`, and as the fact's
  sentence the item itself as JSON (`namespace`, `key`, `value`, `created_at`): what BM25
  and the embedder index, and what `get` reads back;
- `put` of a new value writes one structured episode that ends the current fact
  (`invalid_at`) and states the new one, so kg keeps every earlier value (`history`); `put`
  of the same value writes nothing; `delete` (`put(..., None)`) ends the current fact;
- `get` reads the subject's current fact; `search` with a query is kg's hybrid search,
  keeping the items' facts under the namespace prefix, scored by kg; without a query it
  lists the current items, newest first; `filter` compares top-level value fields ($eq,
  $ne, $gt, $gte, $lt, $lte); `list_namespaces` reads every current item's namespace;
- no TTL (`supports_ttl = False`): kg's facts are closed, never expire; `index` is ignored:
  kg indexes every fact's sentence.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from kg.adapters.memory import Memory, fact_views, hits_of, runner_for
from kg.schemas.views import FactView

PREDICATE = "HAS_VALUE"
_READABLE = 440  # characters of the path kept in the subject's name (names hold 512)
_ALL = 10_000  # items read by a search without a query, and by list_namespaces


def subject_of(namespace: tuple[str, ...], key: str) -> str:
    """The item's subject: readable, and exact through the digest of its path."""
    path = json.dumps([*namespace, key], ensure_ascii=False)
    digest = hashlib.sha256(path.encode()).hexdigest()[:12]
    return f"{'/'.join((*namespace, key))[:_READABLE]} #{digest}"


def object_of(value: Mapping[str, Any]) -> str:
    canonical = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return f"{hashlib.sha256(canonical.encode()).hexdigest()[:16]} (value)"


def item_of(fact: FactView, score: float | None = None) -> SearchItem | None:
    """The item a fact holds, or None for a fact this store did not write."""
    try:
        held = json.loads(fact.text)
        namespace, key, value = tuple(held["namespace"]), held["key"], held["value"]
        created = datetime.fromisoformat(held["created_at"])
    except (ValueError, KeyError, TypeError):
        return None
    return SearchItem(namespace, key, value, created, fact.valid_from, score)


def _matches(item: Item, prefix: tuple[str, ...], filter: dict[str, Any] | None) -> bool:
    if item.namespace[: len(prefix)] != prefix:
        return False
    return all(_holds(item.value.get(k), want) for k, want in (filter or {}).items())


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a is not None and a > b,
    "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b,
    "$lte": lambda a, b: a is not None and a <= b,
}


def _holds(actual: Any, want: Any) -> bool:
    if isinstance(want, dict) and want and all(k in _OPS for k in want):
        try:
            return all(_OPS[op](actual, operand) for op, operand in want.items())
        except TypeError:  # values of different types do not compare
            return False
    return bool(actual == want)


def _namespace_matches(ns: tuple[str, ...], conditions: Iterable[MatchCondition]) -> bool:
    for c in conditions:
        path = tuple(c.path)
        part = ns[: len(path)] if c.match_type == "prefix" else ns[len(ns) - len(path) :]
        if len(path) > len(ns) or any(p not in ("*", q) for p, q in zip(path, part, strict=True)):
            return False
    return True


class KGStore(BaseStore):
    """LangGraph's `BaseStore` over a `KG` or an `AsyncClient` (one group: `group_id`, or
    the client key's). Async methods run on the caller's loop; sync ones on the memory's own
    (kg.adapters.memory.runner_for)."""

    supports_ttl = False

    def __init__(self, memory: Memory, *, group_id: str | None = None) -> None:
        self.memory = memory
        self.group = {"group_id": group_id} if group_id is not None else {}

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return runner_for(self.memory).run(self.abatch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self._get(op.namespace, op.key))
            elif isinstance(op, PutOp):
                await self._put(op.namespace, op.key, op.value)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(await self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._namespaces(op))
            else:
                raise TypeError(f"unknown store operation {type(op).__name__}")
        return results

    async def _current(self, namespace: tuple[str, ...], key: str) -> FactView | None:
        found = await self.memory.facts(
            subject=subject_of(namespace, key), predicate=PREDICATE, **self.group
        )
        mine = [
            f
            for f in fact_views(found)
            if (i := item_of(f)) is not None and (i.namespace, i.key) == (namespace, key)
        ]
        return mine[0] if mine else None

    async def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        fact = await self._current(namespace, key)
        found = item_of(fact) if fact is not None else None
        if found is None:
            return None
        return Item(
            value=found.value,
            key=key,
            namespace=namespace,
            created_at=found.created_at,
            updated_at=found.updated_at,
        )

    async def _put(
        self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None
    ) -> None:
        """One structured episode: the current value ended, the new one stated."""
        now = datetime.now(UTC)
        subject = subject_of(namespace, key)
        current = await self._current(namespace, key)
        facts: list[dict[str, Any]] = []
        if current is not None:
            if value is not None and current.object == object_of(value):
                return  # the same value again: nothing changed
            facts.append(
                {"subject": subject, "predicate": PREDICATE, "object": current.object}
                | {"valid_at": current.valid_from, "invalid_at": now}
            )
        if value is not None:
            held = item_of(current) if current is not None else None
            created = held.created_at if held is not None else now
            text = {"namespace": list(namespace), "key": key, "value": dict(value)}
            text["created_at"] = created.isoformat()
            facts.append(
                {"subject": subject, "predicate": PREDICATE, "object": object_of(value)}
                | {"valid_at": now, "fact": json.dumps(text, ensure_ascii=False, default=str)}
            )
        if facts:
            await self.memory.add_episode(
                source="facts", reference_time=now, facts=facts, **self.group
            )

    async def _items(self) -> list[SearchItem]:
        """Every current item of the group, newest first."""
        found = await self.memory.facts(predicate=PREDICATE, limit=_ALL, **self.group)
        items = [i for f in fact_views(found) if (i := item_of(f)) is not None]
        return sorted(items, key=lambda i: i.updated_at, reverse=True)

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        if not op.query:
            items = [i for i in await self._items() if _matches(i, prefix, op.filter)]
            return items[op.offset : op.offset + op.limit]
        wanted = min(max(3 * (op.offset + op.limit), 20), 100)
        answer = await self.memory.search(op.query, limit=wanted, **self.group)
        items = []
        for hit in hits_of(answer):
            if hit.kind != "fact" or hit.predicate != PREDICATE or hit.status != "current":
                continue
            view = FactView.model_validate(hit.model_dump(exclude={"kind", "score"}))
            item = item_of(view, hit.score)
            if item is not None and _matches(item, prefix, op.filter):
                items.append(item)
        return items[op.offset : op.offset + op.limit]

    async def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        found = {i.namespace for i in await self._items()}
        if op.match_conditions:
            found = {ns for ns in found if _namespace_matches(ns, op.match_conditions)}
        if op.max_depth is not None:
            found = {ns[: op.max_depth] for ns in found}
        return sorted(found)[op.offset : op.offset + op.limit]
