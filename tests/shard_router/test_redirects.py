"""A call Redis did not run (MOVED, ASK, TRYAGAIN) goes again where Redis points, on that node's
link (so with its WAIT), within the deadline of its first send. Real redirections on the test's
own cluster: a stale slot map, a slot mid-migration, a paused target."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import Iterator

import pytest

from kernel.errors import ShardUnavailable
from shard_router import Outcome, ShardRouter, scripts, shard_keys
from tests.shard_router.conftest import RouterFactory
from tests.shard_router.minicluster import MiniCluster

pytestmark = pytest.mark.integration
_items = itertools.count(uuid.uuid4().int % 10**9 * 1000 + 6 * 10**12)
_DEADLINE_S = 0.25  # redis_timeout_ms of the shared settings


def _order() -> str:
    return str(uuid.uuid4())


def _point_slot_elsewhere(router: ShardRouter, mini: MiniCluster, key: str) -> tuple[str, str]:
    """Make the router's slot map stale for ``key`` (as after a failover it has not seen):
    returns (the node it now sends to, the node that owns the slot)."""
    owner = router.pipeline.node_of(key)
    wrong = mini.other_primary(owner)
    host, port = wrong.rsplit(":", 1)
    node = router.client.get_node(host=host, port=int(port))
    assert node is not None
    router.client.nodes_manager.slots_cache[router.client.keyslot(key)] = [node]
    assert router.pipeline.node_of(key) == wrong
    return wrong, owner


@contextlib.contextmanager
def _migrating(mini: MiniCluster, slot: int, source: str, target: str) -> Iterator[None]:
    source_id = mini.command(source, "CLUSTER", "MYID").decode()
    target_id = mini.command(target, "CLUSTER", "MYID").decode()
    mini.command(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
    mini.command(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
    try:
        yield
    finally:
        mini.command(source, "CLUSTER", "SETSLOT", slot, "STABLE")
        mini.command(target, "CLUSTER", "SETSLOT", slot, "STABLE")


async def test_a_moved_call_is_run_and_confirmed_where_redis_points(
    mini_router: RouterFactory, mini: MiniCluster
) -> None:
    async with mini_router() as router:
        item = next(_items)
        await router.load_shard(item, 0, 5, [], [])
        key = shard_keys(item, 0).stock
        _, owner = _point_slot_elsewhere(router, mini, key)
        waits = mini.wait_calls(owner)
        res = await router.reserve(item, 1, 1, _order(), lambda s: b"e")
        assert res.outcome is Outcome.RESERVED and res.units_left_on_shard == 4
        assert mini.wait_calls(owner) == waits + 1  # the resent call was confirmed there
        await asyncio.sleep(0.05)  # the MOVED fixes the slot map in the background
        assert router.pipeline.node_of(key) == owner


async def test_a_redirected_call_keeps_its_first_deadline(
    mini_router: RouterFactory, mini: MiniCluster
) -> None:
    async with mini_router() as router:
        item = next(_items)
        await router.load_shard(item, 0, 5, [], [])
        _, owner = _point_slot_elsewhere(router, mini, shard_keys(item, 0).stock)
        with mini.paused(owner):  # the node Redis redirects to does not answer
            started = time.monotonic()
            with pytest.raises(ShardUnavailable):
                await router.reserve(item, 1, 1, _order(), lambda s: b"e")
            elapsed = time.monotonic() - started
        assert elapsed < _DEADLINE_S + 0.05, elapsed
        res = await router.reserve(item, 1, 2, _order(), lambda s: b"e")
        assert res.outcome is Outcome.RESERVED


async def test_an_ask_redirection_sends_asking_on_the_same_connection(
    mini_router: RouterFactory, mini: MiniCluster
) -> None:
    async with mini_router() as router:
        item = next(_items)
        keys = shard_keys(item, 0)
        source = router.pipeline.node_of(keys.buyers)
        target = mini.other_primary(source)
        order = _order()
        with _migrating(mini, router.client.keyslot(keys.buyers), source, target):
            # The key is not on the source: it answers ASK, the target runs it after ASKING.
            assert await router.pipeline.command(keys.buyers, "HLEN", keys.buyers) == 0
            reply = await router.pipeline.call(scripts.CLAIM, [keys.buyers], [7, order])
            assert reply == [0, order.encode()]
            mini.command(target, "ASKING")  # (the same pooled connection as what follows)
            assert mini.client(target).hget(keys.buyers, "7") == order.encode()
            mini.command(target, "ASKING")
            mini.client(target).delete(keys.buyers)


async def test_tryagain_is_retried_only_until_the_deadline(
    mini_router: RouterFactory, mini: MiniCluster
) -> None:
    async with mini_router() as router:
        item = next(_items)
        await router.load_shard(item, 0, 5, [], [])
        keys = shard_keys(item, 0)
        source = router.pipeline.node_of(keys.stock)
        with _migrating(
            mini, router.client.keyslot(keys.stock), source, mini.other_primary(source)
        ):
            # stock is here, the hashes are not: a multi-key call gets TRYAGAIN, again and again.
            started = time.monotonic()
            with pytest.raises(ShardUnavailable) as raised:
                await router.reserve(item, 1, 1, _order(), lambda s: b"e")
            elapsed = time.monotonic() - started
        assert "TRYAGAIN" in str(raised.value)
        assert _DEADLINE_S - 0.06 < elapsed < _DEADLINE_S + 0.05, elapsed
        res = await router.reserve(item, 1, 1, _order(), lambda s: b"e")
        assert res.outcome is Outcome.RESERVED


async def test_the_cluster_clients_own_retries_are_bounded(router: ShardRouter) -> None:
    # The cold path's commands (scans, loads' topology, pub/sub) run under with_deadline; the
    # client under it retries once and follows at most 3 redirections, not 3 and 16.
    assert router.client.retry.get_retries() == 1
    assert router.client.RedisClusterRequestTTL == 3
