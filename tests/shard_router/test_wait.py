"""A reservation is answered only once the shard's replica has it (WAIT on the node link, once
per pipelined batch): against the test's own cluster, whose replicas it may pause."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid

import pytest

from kernel.errors import ShardUnavailable
from shard_router import Outcome, ShardRouter, shard_keys
from tests.shard_router.conftest import RouterFactory
from tests.shard_router.minicluster import MiniCluster

pytestmark = pytest.mark.integration
_items = itertools.count(uuid.uuid4().int % 10**9 * 1000 + 3 * 10**12)


def _order() -> str:
    return str(uuid.uuid4())


def _primary_of(router: ShardRouter, item: int) -> str:
    return router.pipeline.node_of(shard_keys(item, 0).stock)


async def test_one_wait_per_batch_and_every_reservation_is_on_the_replica(
    mini_router: RouterFactory, mini: MiniCluster
) -> None:
    async with mini_router() as router:
        item = next(_items)
        await router.load_shard(item, 0, 100, [], [])
        primary = _primary_of(router, item)
        before = mini.wait_calls(primary)
        # 50 buyers in one tick: one batch, so one WAIT, however many scripts it carries.
        got = await asyncio.gather(
            *(router.reserve(item, 1, u, _order(), lambda s: b"e") for u in range(1, 51))
        )
        assert all(g.outcome is Outcome.RESERVED for g in got)
        assert mini.wait_calls(primary) - before == 1
        # The replica has every one of them the moment the callers were answered.
        mini.command(mini.replica_of(primary), "READONLY")
        replica = mini.client(mini.replica_of(primary))
        keys = shard_keys(item, 0)
        assert int(replica.get(keys.stock) or -1) == 50
        assert replica.hlen(keys.orders) == 50 and replica.hlen(keys.buyers) == 50
        # Plain commands alone (a scan) send no WAIT.
        await router.outboxes_in_use([(item, 0)])
        assert mini.wait_calls(primary) - before == 1


async def test_wait_off_sends_none(mini_router: RouterFactory, mini: MiniCluster) -> None:
    async with mini_router(redis_wait_replicas=0) as router:
        item = next(_items)
        await router.load_shard(item, 0, 10, [], [])
        primary = _primary_of(router, item)
        before = mini.wait_calls(primary)
        res = await router.reserve(item, 1, 1, _order(), lambda s: b"e")
        assert res.outcome is Outcome.RESERVED
        assert mini.wait_calls(primary) == before


async def test_a_silent_replica_turns_reservations_into_fast_503s_a_retry_resolves(
    mini_router: RouterFactory, mini: MiniCluster
) -> None:
    async with mini_router(redis_wait_timeout_ms=100) as router:
        item = next(_items)
        await router.load_shard(item, 0, 100, [], [])
        primary = _primary_of(router, item)
        orders = {u: _order() for u in range(1, 31)}
        with mini.paused(mini.replica_of(primary)):
            started = time.monotonic()
            got = await asyncio.gather(
                *(router.reserve(item, 1, u, o, lambda s: b"e") for u, o in orders.items()),
                return_exceptions=True,
            )
            elapsed = time.monotonic() - started
        # Every buyer is told "could not confirm", within the WAIT timeout, not the deadline.
        assert all(isinstance(g, ShardUnavailable) for g in got), got
        assert elapsed < 0.25
        # The holds are on the primary (the relay delivers those orders): a buyer's retry, once
        # the replica is back, meets their own order, and no unit was taken twice.
        deadline = time.monotonic() + 5
        while True:
            try:
                retry = await router.reserve(item, 1, 7, _order(), lambda s: b"e")
                break
            except ShardUnavailable:  # the breaker's cooldown, then a probe
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
        assert retry.outcome is Outcome.ALREADY and retry.order_id == orders[7]
        [state] = await router.shard_states(item, 1)
        assert (state.stock, state.holds, state.buyers) == (70, 30, 30)


async def test_a_load_waits_for_the_replica(mini_router: RouterFactory, mini: MiniCluster) -> None:
    async with mini_router() as router:
        item = next(_items)
        primary = _primary_of(router, item)
        with mini.paused(mini.replica_of(primary)), pytest.raises(ShardUnavailable):
            await router.load_shard(item, 0, 10, [], [])
        await router.load_shard(item, 0, 10, [], [])  # the replica back: confirmed
        mini.command(mini.replica_of(primary), "READONLY")
        replica = mini.client(mini.replica_of(primary))
        assert replica.get(shard_keys(item, 0).stock) == b"10"
