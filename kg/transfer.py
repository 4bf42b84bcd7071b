"""Export a group to JSON Lines and import it into any backend: how a user moves from the
embedded store to Neo4j (or back, or between machines).

The file is the models' own JSON, one record a line, its kind under "record": a header,
then every entity, episode, fact version (all of them: the bi-temporal history travels
whole), mention, community, membership and audit event, with uuids, times and embeddings as
stored, then a trailer with the counts. An import is checked line by line against the
models and goes only into a group that does not exist yet. Every record is rewritten to the
target group, whatever group the file names: on Neo4j all groups share one database, and a
row keeping its original group_id would land in another tenant.

An import loads into a staging area (a graph, or a group id, that no group lookup sees) and
becomes the group in one step at the end (FalkorDB: a key rename; Neo4j: the staging id
rewritten in one transaction). A file that is malformed, truncated (no trailer, or counts
that disagree) or refused by the store, and an import killed midway, leave no group behind,
and the import can simply be run again: leftovers of a killed one are dropped first.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ValidationError

from kg.errors import InputError, WriteConflictError, json_object
from kg.schemas.embedder import EmbeddingModel
from kg.schemas.graph import VECTOR_FIELDS, EntityNode
from kg.schemas.labels import ENTITY_LABEL, check_not_reserved
from kg.schemas.store import (
    RECORD_MODELS,
    EmbeddingModels,
    Mention,
    Record,
    RecordKind,
    RecordTransfer,
    StagedImport,
    StoreAdmin,
    staging_name,
)
from kg.schemas.validation import check_group_id, validation_message

FORMAT = "kg-export/1"
PAGE = 2000
BATCH = 500


__all__ = ["MODELS", "Mention", "TransferReport", "dump_all", "export_lines", "import_lines"]

# Load order: what a record refers to is always loaded before it.
MODELS = RECORD_MODELS


class TransferStore(RecordTransfer, StagedImport, StoreAdmin, EmbeddingModels, Protocol):
    """Records in and out, staged imports, and the store-wide calls around them (groups,
    drop, dimension, the model that embedded the group)."""


class Header(BaseModel):
    record: Literal["header"] = "header"
    format: str = FORMAT
    group_id: str
    exported_at: datetime
    backend: str
    embeddings: bool
    embedding_model: EmbeddingModel | None = None  # the model the group's vectors came from


class Trailer(BaseModel):
    record: Literal["end"] = "end"
    counts: dict[str, int]


class TransferReport(BaseModel):
    group_id: str
    counts: dict[str, int]
    embedding_dim: int | None = None


async def export_lines(
    store: TransferStore, group_id: str, *, embeddings: bool = True
) -> AsyncIterator[str]:
    """The export, one JSON line at a time (pages of PAGE items; memory stays flat)."""
    if not await store.has_group(group_id):
        raise InputError(f"no group {group_id!r} to export")
    header = Header(
        group_id=group_id,
        exported_at=datetime.now(UTC),
        backend=store.backend,
        embeddings=embeddings,
        embedding_model=await store.embedding_model(group_id) if embeddings else None,
    )
    yield header.model_dump_json()
    counts = dict.fromkeys(map(str, MODELS), 0)
    for kind, model in MODELS.items():
        async for row in dump_all(store, group_id, kind):
            if not embeddings:
                for key in VECTOR_FIELDS:
                    row.pop(key, None)
            item = model.model_validate(row)
            yield json.dumps(
                {"record": kind, **item.model_dump(mode="json", exclude_none=True)},
                ensure_ascii=False,
            )
            counts[kind] += 1
    yield Trailer(counts=counts).model_dump_json()


async def dump_all(
    store: RecordTransfer, group_id: str, kind: RecordKind
) -> AsyncIterator[dict[str, Any]]:
    """Every item of a kind, as the store dumps it, a page of PAGE at a time."""
    after = ""
    while True:
        page = await store.dump_page(group_id, kind, after, PAGE)
        for row in page:
            yield row
        if len(page) < PAGE:
            return
        after = str(page[-1]["uuid"])


async def import_lines(
    store: TransferStore, lines: Iterable[str], *, into: str | None = None, source: str = "<input>"
) -> TransferReport:
    """Load an export into a new group (`into`, default: the exported group's id)."""
    it = iter(enumerate(lines, start=1))
    header = _header(it, source)
    group = into or header.group_id
    try:
        check_group_id(group)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if await store.has_group(group):
        raise InputError(
            f"group {group!r} already exists; import into a new group (--into NAME), or erase "
            "it first: an import never merges into or overwrites stored data"
        )
    for leftover in await store.staged(group):  # a killed import of this group left these
        await store.drop_staged(leftover)
    staging = staging_name(group, uuid.uuid4().hex[:16])
    report = TransferReport(group_id=group, counts=dict.fromkeys(map(str, MODELS), 0))
    try:
        model = await _load(store, it, source, header, staging, group, report)
        try:
            await store.publish_staged(group, staging)
        except WriteConflictError:
            raise InputError(
                f"group {group!r} was created by another writer meanwhile; "
                "nothing was imported: import into a new group"
            ) from None
    except BaseException:
        with contextlib.suppress(Exception):  # a store gone by now: the next import drops it
            await store.drop_staged(staging)
        raise
    if model is not None:  # so that embedder="auto" finds the model again
        await store.record_embedding_model(group, model)
    return report


def _header(it: Iterable[tuple[int, str]], source: str) -> Header:
    for lineno, line in it:
        if line.strip():
            try:
                header = Header.model_validate_json(line)
            except ValidationError:
                raise InputError(f"{source}:{lineno}: not a kg export (no header line)") from None
            if header.format != FORMAT:
                raise InputError(
                    f"{source}:{lineno}: format {header.format!r}, expected {FORMAT!r}"
                )
            return header
    raise InputError(f"{source}: empty file")


async def _load(
    store: TransferStore,
    it: Iterable[tuple[int, str]],
    source: str,
    header: Header,
    staging: str,
    group: str,
    report: TransferReport,
) -> EmbeddingModel | None:
    """Load the records into the staging area; returns the embedding model to record for
    the group once it is published."""
    batch: list[Record] = []
    kind: RecordKind | None = None
    order = list(MODELS)
    trailer: Trailer | None = None
    for lineno, line in it:
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
        if trailer is not None:
            raise InputError(f"{where}: data after the end record")
        row = json_object(line, where)
        record = row.pop("record", None)
        if record == "end":
            trailer = _parse(Trailer, {"record": "end", **row}, where)
            continue
        if record not in MODELS:
            raise InputError(f"{where}: unknown record kind {record!r}")
        k = RecordKind(record)
        if order.index(k) < order.index(kind or k):
            raise InputError(
                f"{where}: {k.value!r} records after {kind and kind.value!r} ones; "
                "the file is out of order (was it edited?)"
            )
        if k != kind and batch:
            await store.load_staged(group, staging, batch)
            batch = []
        kind = k
        if "group_id" in row:  # always: a row never keeps another group's id
            row["group_id"] = group
        item = _parse(MODELS[k], row, where)
        if isinstance(item, EntityNode):
            _check_labels(item, where)
        _check_dim(item, report, store, where)
        batch.append(item)
        report.counts[k] += 1
        if len(batch) >= BATCH:
            await store.load_staged(group, staging, batch)
            batch = []
    if batch:
        await store.load_staged(group, staging, batch)
    if trailer is None:
        raise InputError(f"{source}: truncated: no end record; nothing was imported")
    if trailer.counts != report.counts:
        raise InputError(
            f"{source}: counts {report.counts} disagree with the end record's "
            f"{trailer.counts}; nothing was imported"
        )
    model = header.embedding_model
    if model is not None and report.embedding_dim is not None:
        if model.dim != report.embedding_dim:
            raise InputError(
                f"{source}: the header names {model}, the vectors have "
                f"{report.embedding_dim}; nothing was imported"
            )
        return model
    return None


def _parse(model: type[Any], row: dict[str, Any], where: str) -> Any:
    try:
        return model.model_validate(row)
    except ValidationError as exc:
        raise InputError(f"{where}: {validation_message(exc)}") from None


def _check_labels(entity: EntityNode, where: str) -> None:
    for label in set(entity.labels) - {ENTITY_LABEL}:
        try:
            check_not_reserved(label)
        except ValueError as exc:
            raise InputError(f"{where}: {exc}") from None


def _check_dim(item: BaseModel, report: TransferReport, store: StoreAdmin, where: str) -> None:
    for key in VECTOR_FIELDS:
        v = getattr(item, key, None)
        if not v:
            continue
        if report.embedding_dim is None:
            report.embedding_dim = len(v)
            want = store.embedding_dim
            if want and want != len(v):
                raise InputError(
                    f"{where}: embeddings have {len(v)} dimensions, the store's vector indexes "
                    f"{want}; open it with the embedder that wrote them"
                )
        elif len(v) != report.embedding_dim:
            raise InputError(
                f"{where}: {key} has {len(v)} dimensions, earlier ones {report.embedding_dim}"
            )
