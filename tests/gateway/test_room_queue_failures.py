"""A waiting room's Redis calls fail the way every cold-path call does (shard_router/deadline.py):
as ShardUnavailable, a 503, with the connections the failure may have left dead dropped. The
cluster client is faked here (its calls raise what redis-py lets out when a node was killed);
the whole-system case is tests/faults/test_arm_after_failover.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest
from redis.asyncio.cluster import RedisCluster

from gateway.waiting_room import queue
from kernel.errors import ShardUnavailable

SALE = 52


class _Node:
    def __init__(self) -> None:
        self.dropped = False

    def update_active_connections_for_reconnect(self) -> None:
        pass

    async def disconnect_free_connections(self) -> None:
        self.dropped = True


class _BrokenClient:
    """Every command fails as a write on a pooled connection to a restarted node does."""

    def __init__(self) -> None:
        self.nodes = [_Node(), _Node()]

    def get_nodes(self) -> list[_Node]:
        return self.nodes

    def __getattr__(self, name: str) -> Any:
        async def broken(*args: Any) -> Any:
            raise RuntimeError(
                "unable to perform operation on <TCPTransport closed=True>; the handler is closed"
            )

        return broken


CALLS: dict[str, Callable[[RedisCluster], Awaitable[Any]]] = {
    "join": lambda c: queue.join(c, SALE, 1, 0, "127.0.0.1", 2e9),
    "place_of": lambda c: queue.place_of(c, SALE, 1),
    "fix_places": lambda c: queue.fix_places(c, SALE, 0),
    "apply_controls": lambda c: queue.apply_controls(c, SALE, queue.Controls(-1, False, 1), 2e9),
    "advance": lambda c: queue.advance(c, SALE, queue.Controls(1, False, 1), 2e9, None, 30),
    "snapshot": lambda c: queue.snapshot(c, SALE),
}


@pytest.mark.parametrize("call", CALLS)
async def test_a_broken_connection_is_a_503_and_the_pools_are_dropped(call: str) -> None:
    broken = _BrokenClient()
    with pytest.raises(ShardUnavailable, match="RuntimeError"):
        await CALLS[call](cast(RedisCluster, broken))
    assert all(node.dropped for node in broken.nodes), "a dead pooled connection was kept"
