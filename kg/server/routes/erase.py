"""/v1/rollback and /v1/erase: undoing episodes (a plan unless asked), and erasure."""

from __future__ import annotations

from fastapi import APIRouter

from kg.erasure import ErasureReceipt
from kg.rollback import RollbackReport
from kg.server.models import EraseEntityRequest, EraseGroupRequest, RollbackRequest
from kg.server.openapi import problems
from kg.server.routes.deps import Caller

router = APIRouter(prefix="/v1", tags=["erase"])


@router.post("/rollback", responses=problems(404, body=True))
async def rollback(c: Caller, body: RollbackRequest) -> RollbackReport:
    """Undo episodes as if never ingested. A dry run (the plan) by default, for any role;
    `dry_run: false` carries it out atomically and needs the admin role."""
    return await c.rollback(body)


@router.post("/erase/entity", responses=problems(404, body=True))
async def erase_subject(c: Caller, body: EraseEntityRequest) -> ErasureReceipt:
    """Physically delete a subject (admin); `confirm` repeats it. Not undoable;
    `dry_run: true` says what would go and erases nothing."""
    return await c.erase_entity(body)


@router.post("/erase/group", responses=problems(body=True))
async def erase_group(c: Caller, body: EraseGroupRequest) -> ErasureReceipt:
    """Physically delete this key's whole group (admin); `confirm` is the group id."""
    return await c.erase_group(body)
