"""A FalkorDB server that stops answering is a one-line kg error, never a redis traceback.

The client below is the falkordb client's surface with a server that times out on every
call, so each store entry point is exercised without a server to stall.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kg.errors import StoreError, StoreUnavailableError
from kg.schemas import FactQuery
from kg.schemas.metrics import QueryMetrics
from kg.store.falkordb import FalkorDBStore
from tests.conftest import t

pytestmark = pytest.mark.falkordb_only("a stand-in for the falkordb client's failure modes")


class SilentServer:
    """Every call fails the way redis-py fails when the server does not answer."""

    def __init__(self, error: Exception, *, hush: bool = False) -> None:
        self.error = error
        self.connection = self
        self.hush = hush  # the query-log block (a SET) succeeds; what follows fails

    async def set(self, *args: Any, **kwargs: Any) -> Any:
        if self.hush:
            return True
        raise self.error

    def select_graph(self, name: str) -> SilentServer:
        return self

    async def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    ro_query = query = delete = list_graphs = execute_command = info = _fail


Call = Callable[[FalkorDBStore], Awaitable[Any]]
CALLS: dict[str, Call] = {
    "read": lambda s: s.facts(FactQuery(group_id="g", valid_at=t(2024), known_at=t(2024))),
    # The first write of a group creates its schema first: that too is inside the translation.
    "write": lambda s: s.record_query_metrics("g", QueryMetrics(queries=1)),
    "groups": lambda s: s.groups(),
    "has_group": lambda s: s.has_group("g"),
    "drop": lambda s: s.drop_group("g"),
    "compact": lambda s: s.compact(),
}


@pytest.mark.parametrize("call", CALLS)
async def test_a_server_that_times_out_is_store_unavailable_on_one_line(call: str) -> None:
    store = FalkorDBStore(
        SilentServer(RedisTimeoutError("Timeout reading from\nsocket")), None, embedding_dim=None
    )
    with pytest.raises(StoreUnavailableError, match="FalkorDB did not answer in time") as exc:
        await CALLS[call](store)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("call", CALLS)
async def test_a_lost_server_is_store_unavailable(call: str) -> None:
    store = FalkorDBStore(
        SilentServer(RedisConnectionError("Connection closed by server.")), None, embedding_dim=None
    )
    with pytest.raises(StoreUnavailableError, match="lost the FalkorDB server"):
        await CALLS[call](store)


async def test_schema_errors_keep_their_own_message() -> None:
    from redis.exceptions import ResponseError

    store = FalkorDBStore(
        SilentServer(ResponseError("unknown index type"), hush=True), None, embedding_dim=None
    )
    with pytest.raises(StoreError, match="FalkorDB refused schema statement: unknown index"):
        await CALLS["write"](store)
