"""A shard whose stock key is missing (a node restarted empty, a replica promoted before it had
the load) is unknown, never empty: ShardNotLoaded (a 503), never SOLD_OUT."""

from __future__ import annotations

import itertools
import uuid

import pytest

from kernel.errors import ShardUnavailable
from shard_router import Outcome, ShardNotLoaded, ShardRouter, shard_keys

pytestmark = pytest.mark.integration
_items = itertools.count(uuid.uuid4().int % 10**9 * 1000 + 4 * 10**12)


def _order() -> str:
    return str(uuid.uuid4())


async def test_a_shard_never_loaded_answers_not_loaded(router: ShardRouter) -> None:
    item = next(_items)
    with pytest.raises(ShardNotLoaded) as raised:
        await router.reserve(item, 1, 7, _order(), lambda s: b"e")
    assert isinstance(raised.value, ShardUnavailable)  # the gateway's 503 as it is
    [state] = await router.shard_states(item, 1)
    assert (state.holds, state.buyers, state.outbox) == (0, 0, 0)


async def test_a_shard_that_lost_its_stock_key_is_not_sold_out(router: ShardRouter) -> None:
    item = next(_items)
    await router.load_shard(item, 0, 1, [], [])
    assert (await router.reserve(item, 1, 1, _order(), lambda s: b"e")).outcome is Outcome.RESERVED
    assert (await router.reserve(item, 1, 2, _order(), lambda s: b"e")).outcome is Outcome.SOLD_OUT
    await router.client.delete(shard_keys(item, 0).stock)  # what a node restarted empty holds
    with pytest.raises(ShardNotLoaded):
        await router.reserve(item, 1, 3, _order(), lambda s: b"e")
    with pytest.raises(ShardNotLoaded):
        await router.units_left(item, 1)  # so the gateway's sold-out flag is not renewed


async def test_an_unloaded_donor_never_makes_the_item_sold_out(router: ShardRouter) -> None:
    item = next(_items)
    await router.load_shard(item, 0, 0, [], [])
    await router.load_shard(item, 2, 0, [], [])  # shard 1 is never loaded
    # Buyers at home on shard 0 (multiples of 3) borrow from 1 (unknown) and 2 (empty).
    with pytest.raises(ShardNotLoaded):
        await router.reserve(item, 3, 3, _order(), lambda s: b"e")
    states = await router.shard_states(item, 3)
    assert states[0].buyers == 0, "no pending borrow is left behind"
    # A loaded donor with stock still lends, whatever the unknown one holds.
    await router.load_shard(item, 2, 1, [], [])
    res = await router.reserve(item, 3, 6, _order(), lambda s: b"e")
    assert res.outcome is Outcome.RESERVED and res.unit_shard == 2
    # The home shard itself unknown: no borrowing either.
    other = next(_items)
    await router.load_shard(other, 1, 5, [], [])
    with pytest.raises(ShardNotLoaded):
        await router.reserve(other, 2, 2, _order(), lambda s: b"e")


async def test_release_never_creates_a_missing_stock_key(router: ShardRouter) -> None:
    item = next(_items)
    await router.load_shard(item, 0, 1, [], [])
    order = _order()
    assert (await router.reserve(item, 1, 4, order, lambda s: b"e")).outcome is Outcome.RESERVED
    await router.client.delete(shard_keys(item, 0).stock)
    assert await router.release(item, 1, 0, 4, order) is False
    assert await router.client.exists(shard_keys(item, 0).stock) == 0
