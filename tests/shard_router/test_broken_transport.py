"""A pooled connection whose server went away (a node killed and restarted): on the gateway's
loop (uvloop) redis-py's next write on it raises RuntimeError ("the handler is closed"), which it
lets out as it is. Every cold-path call of the router, the voucher store and the waiting-room
tick answers ShardUnavailable instead (a 503 with Retry-After), and drops the node's dead
connections, so the call after it works.

The transports are closed under established connections, as a server's death closes them, on a
real uvloop loop (the gateway's: asyncio's own loop raises no RuntimeError here).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import uvloop

from domain.arm import check_cluster_ready
from gateway.waiting_room import queue
from kernel.errors import ShardUnavailable
from kernel.settings import Settings
from shard_router import ShardRouter, VoucherStore, shard_keys, voucher_keys

_items = itertools.count(uuid.uuid4().int % 10**9 * 1000 + 8 * 10**12)


@dataclass(frozen=True, slots=True)
class Target:
    router: ShardRouter
    store: VoucherStore
    item: int
    code: str
    sale: int


Op = Callable[[Target], Awaitable[Any]]


def _arm_readiness(t: Target) -> Awaitable[None]:
    return check_cluster_ready(t.router)


def _load_scripts(t: Target) -> Awaitable[None]:
    return t.router.load_scripts()


def _units_left(t: Target) -> Awaitable[int]:
    return t.router.units_left(t.item, 1)


def _shard_states(t: Target) -> Awaitable[Any]:
    return t.router.shard_states(t.item, 1)


def _holds(t: Target) -> Awaitable[dict[str, int]]:
    return t.router.holds(t.item, 0)


def _outbox(t: Target) -> Awaitable[dict[str, bytes]]:
    return t.router.outbox(t.item, 0)


def _buyer_order(t: Target) -> Awaitable[str | None]:
    return t.router.buyer_order(t.item, 1, 7)


def _voucher_hold(t: Target) -> Awaitable[bool]:
    return t.store.holds_order(t.code, str(uuid.uuid4()))


def _room_tick(t: Target) -> Awaitable[queue.Advanced]:
    controls = queue.Controls(version=0, paused=False, rate=10)
    return queue.advance(t.router.client, t.sale, controls, time.time() + 60, 5, 10)


def _room_places(t: Target) -> Awaitable[bool]:
    return queue.fix_places(t.router.client, t.sale, 0)


# (operation, the key whose node it reaches; None: every primary)
OPS: dict[str, tuple[Op, Callable[[Target], str] | None]] = {
    "arm readiness": (_arm_readiness, None),
    "script load": (_load_scripts, None),
    "units left": (_units_left, lambda t: shard_keys(t.item, 0).stock),
    "shard states": (_shard_states, lambda t: shard_keys(t.item, 0).stock),
    "holds": (_holds, lambda t: shard_keys(t.item, 0).orders),
    "outbox": (_outbox, lambda t: shard_keys(t.item, 0).outbox),
    "buyer order": (_buyer_order, lambda t: shard_keys(t.item, 0).buyers),
    "voucher hold": (_voucher_hold, lambda t: voucher_keys(t.code).holds),
    "waiting-room tick": (_room_tick, lambda t: f"{{room:{t.sale}}}:meta"),
    "waiting-room places": (_room_places, lambda t: f"{{room:{t.sale}}}:meta"),
}


def close_transports(router: ShardRouter, node_name: str) -> int:
    """Close the transport under every pooled connection to the node, as its death would."""
    node = router.client.get_node(node_name=node_name)
    assert node is not None, node_name
    closed = 0
    for connection in node._free:
        writer = connection._writer
        if writer is not None:
            writer.transport.abort()
            closed += 1
    return closed


@pytest.mark.parametrize("name", list(OPS))
def test_a_dead_pooled_connection_is_a_503_and_the_next_call_reconnects(
    live_stack: Settings, name: str
) -> None:
    op, key_of = OPS[name]

    async def body() -> None:
        router = ShardRouter(live_stack)
        await router.start()
        try:
            target = Target(router, VoucherStore(router), next(_items), uuid.uuid4().hex, 0)
            target = Target(router, target.store, target.item, target.code, target.item)
            await router.load_shard(target.item, 0, 5, [], [])
            # Side by side: the node's pool now holds several established connections.
            await asyncio.gather(*(op(target) for _ in range(4)))
            node = (
                router.client.get_primaries()[0].name
                if key_of is None
                else router.pipeline.node_of(key_of(target))
            )
            assert close_transports(router, node) >= 2
            with pytest.raises(ShardUnavailable):
                await op(target)
            await op(target)  # every dead connection went with the failure, not just one
        finally:
            await router.close()

    uvloop.run(body())
