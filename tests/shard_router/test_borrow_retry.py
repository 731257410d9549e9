"""A buyer's retry after a 503 on the borrow path (home shard empty: a unit taken on another shard,
then claimed on the home shard) never takes a second unit, and the buyer ends with one orderId.
The first attempt is played by calling the scripts in the order a crash leaves them."""

from __future__ import annotations

import asyncio
import itertools
import uuid

import pytest

from kernel.errors import ShardUnavailable
from kernel.settings import Settings
from kernel.sharding import home_shard
from shard_router import Outcome, ShardRouter, scripts, shard_keys
from tests.shard_router.conftest import RouterFactory
from tests.shard_router.minicluster import MiniCluster

pytestmark = pytest.mark.integration
_items = itertools.count(uuid.uuid4().int % 10**9 * 1000 + 5 * 10**12)
_USER = 30  # home shard 0 of 3


def _order() -> str:
    return str(uuid.uuid4())


async def _pending_borrow(router: ShardRouter, item: int, order: str, lease_ms: int) -> int:
    """The first attempt's reserve on the empty home shard: its pending borrow is written. Returns
    the Redis-clock deadline its borrows carry."""
    keys = shard_keys(item, home_shard(_USER, 3))
    reply = await router.pipeline.call(scripts.RESERVE, list(keys), [_USER, order, b"e", lease_ms])
    assert reply[0] == 3
    return int(reply[2]) + lease_ms // 2


async def _borrow(router: ShardRouter, item: int, donor: int, order: str, not_after: int) -> int:
    keys = shard_keys(item, donor)
    reply = await router.pipeline.call(
        scripts.BORROW, [keys.stock, keys.orders, keys.outbox], [_USER, order, b"e", not_after]
    )
    return int(reply[0])


async def _dedup(router: ShardRouter, item: int) -> bytes | None:
    value = await router.client.hget(shard_keys(item, 0).buyers, str(_USER))
    assert value is None or isinstance(value, bytes)
    return value


async def _taken(router: ShardRouter, item: int, loaded: int) -> int:
    states = await router.shard_states(item, 3)
    assert all(s.stock >= 0 for s in states)
    return loaded - sum(s.stock for s in states)


async def test_a_retry_after_a_borrow_whose_claim_never_came_gets_that_order(
    router: ShardRouter, live_stack: Settings
) -> None:
    item = next(_items)
    for k, units in enumerate((0, 0, 2)):
        await router.load_shard(item, k, units, [], [])
    first = _order()
    not_after = await _pending_borrow(router, item, first, live_stack.borrow_lease_ms)
    assert await _borrow(router, item, 2, first, not_after) == 0  # taken; then the crash
    # Before the retry, units come back to shard 1, first in the retry's borrow order: the old
    # code borrowed a second unit there.
    await router.load_shard(item, 1, 1, [], [])
    retry = await router.reserve(item, 3, _USER, _order(), lambda s: b"e")
    assert retry.outcome is Outcome.ALREADY and retry.order_id == first
    assert await _dedup(router, item) == first.encode()  # claimed for the buyer
    assert await _taken(router, item, 3) == 1
    assert await router.holds(item, 2) == {first: _USER} and await router.holds(item, 1) == {}
    again = await router.reserve(item, 3, _USER, _order(), lambda s: b"e")
    assert again.outcome is Outcome.ALREADY and again.order_id == first
    assert await router.buyer_order(item, 3, _USER) == first


async def test_concurrent_retries_after_an_unclaimed_borrow_take_no_unit(
    router: ShardRouter, live_stack: Settings
) -> None:
    item = next(_items)
    for k, units in enumerate((0, 5, 5)):
        await router.load_shard(item, k, units, [], [])
    first = _order()
    not_after = await _pending_borrow(router, item, first, live_stack.borrow_lease_ms)
    assert await _borrow(router, item, 1, first, not_after) == 0
    got = await asyncio.gather(
        *(router.reserve(item, 3, _USER, _order(), lambda s: b"e") for _ in range(20))
    )
    assert {(g.outcome, g.order_id) for g in got} == {(Outcome.ALREADY, first)}
    assert await _taken(router, item, 10) == 1
    assert await _dedup(router, item) == first.encode()


async def test_a_pending_borrow_that_took_nothing_is_replaced_once_its_lease_is_over(
    router_with: RouterFactory,
) -> None:
    lease_ms = 600
    async with router_with(borrow_lease_ms=lease_ms) as router:
        item = next(_items)
        for k, units in enumerate((0, 0, 3)):
            await router.load_shard(item, k, units, [], [])
        first = _order()
        # The first attempt wrote its pending borrow, then its borrow never reached shard 2.
        not_after = await _pending_borrow(router, item, first, lease_ms)
        # A retry while that borrow may still be under way: 503, nothing taken.
        with pytest.raises(ShardUnavailable):
            await router.reserve(item, 3, _USER, _order(), lambda s: b"e")
        assert await _taken(router, item, 3) == 0
        await asyncio.sleep(lease_ms / 1000)
        second = _order()
        retry = await router.reserve(item, 3, _USER, second, lambda s: b"e")
        assert retry.outcome is Outcome.RESERVED and retry.unit_shard == 2
        assert await _dedup(router, item) == second.encode()
        # The first attempt's borrow, arriving now (a delayed write): refused, nothing taken.
        assert await _borrow(router, item, 2, first, not_after) == 6
        assert await _taken(router, item, 3) == 1
        assert await router.holds(item, 2) == {second: _USER}


async def test_a_borrow_that_finds_nothing_leaves_no_pending_entry(router: ShardRouter) -> None:
    item = next(_items)
    for k in range(3):
        await router.load_shard(item, k, 0, [], [])
    sold_out = await router.reserve(item, 3, _USER, _order(), lambda s: b"e")
    assert sold_out.outcome is Outcome.SOLD_OUT
    assert await _dedup(router, item) is None
    await router.load_shard(item, 2, 1, [], [])  # a unit comes back: the buyer may have it
    res = await router.reserve(item, 3, _USER, _order(), lambda s: b"e")
    assert res.outcome is Outcome.RESERVED and res.unit_shard == 2


async def test_claim_and_unclaim_know_a_pending_borrow(router: ShardRouter) -> None:
    item = next(_items)
    buyers = shard_keys(item, 0).buyers
    first, second = _order(), _order()
    await router.client.hset(buyers, str(_USER), f"~1~{second}")
    # A claim of an order a newer borrow replaced: refused, so its caller gives the unit back.
    reply = await router.pipeline.call(scripts.CLAIM, [buyers], [_USER, first])
    assert reply == [3, second.encode()]
    assert await router.pipeline.call(scripts.UNCLAIM, [buyers], [_USER, first]) == 0
    assert await router.pipeline.call(scripts.UNCLAIM, [buyers], [_USER, second]) == 1
    assert await _dedup(router, item) is None


async def test_a_home_node_that_hangs_between_borrow_and_claim_costs_one_unit(
    mini_router: RouterFactory, mini: MiniCluster
) -> None:
    """A real fault: the home shard's node stops answering right after the unit was borrowed
    from a shard on the other node, so the claim misses its deadline (503). The retry gets the
    order the borrow made, whether or not the late claim ran when the node came back."""
    async with mini_router() as router:
        # Shards 0 and 2 of an item are on different halves of the slots, so different nodes of
        # the mini cluster; shard 1 is on shard 0's.
        item = next(_items)
        home_node = router.pipeline.node_of(shard_keys(item, 0).stock)
        assert router.pipeline.node_of(shard_keys(item, 2).stock) != home_node
        for k, units in enumerate((0, 0, 5)):
            await router.load_shard(item, k, units, [], [])
        first = _order()

        def payload_for(shard: int) -> bytes:
            if shard == 2:  # the borrow from the other node is being sent: home stops now
                mini.pause(home_node)
            return b"e"

        try:
            with pytest.raises(ShardUnavailable):
                await router.reserve(item, 3, _USER, first, payload_for)
        finally:
            mini.resume(home_node)
        deadline = asyncio.get_running_loop().time() + 5
        while True:
            try:
                retry = await router.reserve(item, 3, _USER, _order(), lambda s: b"e")
                break
            except ShardUnavailable:  # the new connection, the breaker: not yet
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.1)
        assert retry.outcome is Outcome.ALREADY and retry.order_id == first
        assert await _taken(router, item, 5) == 1
        assert await router.holds(item, 2) == {first: _USER}
