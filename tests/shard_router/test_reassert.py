"""Re-assert and forfeit (lua/reassert.lua, forfeit.lua, voucher_reassert.lua,
voucher_forfeit.lua), called directly against the real cluster: what a promoted replica that
never got a reservation holds is emulated by undoing the reservation's Lua writes by hand."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator

import pytest

from domain.vouchers import Outcome as VoucherOutcome
from shard_router import Outcome, ShardRouter, VoucherStore, shard_keys, voucher_keys
from shard_router.reassert import (
    Reasserted,
    Restored,
    forfeit_order,
    forfeit_use,
    reassert_order,
    reassert_use,
)

pytestmark = pytest.mark.integration

_ids = itertools.count(int(uuid.uuid4().int % 10**9) * 1000)
P, R, U = Restored.PRESENT, Restored.RESTORED, Restored.UNBACKED


@pytest.fixture
async def item(router: ShardRouter) -> AsyncIterator[int]:
    item = next(_ids)
    yield item
    for k in range(2):
        await router.client.delete(*shard_keys(item, k))


async def _forget(
    router: ShardRouter, item: int, shard: int, home: int, user: int, order: str
) -> None:
    """What a replica promoted before it got the reservation holds: the unit back in stock, no
    hold record, no outbox entry, no dedup entry."""
    unit, at_home = shard_keys(item, shard), shard_keys(item, home)
    assert await router.client.hdel(unit.orders, order) == 1
    await router.client.hdel(unit.outbox, order)
    await router.client.incr(unit.stock)
    assert await router.client.hdel(at_home.buyers, str(user)) == 1


async def _state(router: ShardRouter, item: int, shards: int = 1) -> list[tuple[int, int, int]]:
    return [(s.stock, s.holds, s.buyers) for s in await router.shard_states(item, shards)]


async def test_a_forgotten_reservation_is_restored_once(router: ShardRouter, item: int) -> None:
    await router.load_shard(item, 0, 3, [], [])
    order = str(uuid.uuid4())
    assert (await router.reserve(item, 1, 7, order, lambda _: b"e")).outcome is Outcome.RESERVED
    assert await reassert_order(router, item, 1, 0, 7, order) == Reasserted(P, P)
    assert await _state(router, item) == [(2, 1, 1)]

    await _forget(router, item, 0, 0, 7, order)
    assert await _state(router, item) == [(3, 0, 0)]
    assert await reassert_order(router, item, 1, 0, 7, order) == Reasserted(R, R)
    assert await _state(router, item) == [(2, 1, 1)]
    # A replayed batch re-asserts again: no second unit.
    assert await reassert_order(router, item, 1, 0, 7, order) == Reasserted(P, P)
    assert await _state(router, item) == [(2, 1, 1)]
    assert await router.holds(item, 0) == {order: 7}
    # The buyer's dedup entry is back: a second purchase is refused again.
    again = await router.reserve(item, 1, 7, str(uuid.uuid4()), lambda _: b"e")
    assert again.outcome is Outcome.ALREADY and again.order_id == order


async def test_a_unit_sold_again_is_restored_without_stock(router: ShardRouter, item: int) -> None:
    order = str(uuid.uuid4())
    await router.load_shard(item, 0, 0, [], [])  # the forgotten unit has been sold again
    assert await reassert_order(router, item, 1, 0, 7, order) == Reasserted(U, R)
    assert await _state(router, item) == [(0, 1, 1)]  # never below 0
    assert await reassert_order(router, item, 1, 0, 7, order) == Reasserted(P, P)
    assert await _state(router, item) == [(0, 1, 1)]


async def test_a_borrowed_unit_and_its_home_shard(router: ShardRouter, item: int) -> None:
    await router.load_shard(item, 0, 0, [], [])
    await router.load_shard(item, 1, 2, [], [])
    order = str(uuid.uuid4())  # user 10 is at home on shard 0, the unit came from shard 1
    reserved = await router.reserve(item, 2, 10, order, lambda _: b"e")
    assert (reserved.outcome, reserved.unit_shard) == (Outcome.RESERVED, 1)
    await _forget(router, item, 1, 0, 10, order)
    assert await reassert_order(router, item, 2, 1, 10, order) == Reasserted(R, R)
    assert await _state(router, item, 2) == [(0, 0, 1), (1, 1, 0)]
    assert await reassert_order(router, item, 2, 1, 10, order) == Reasserted(P, P)
    assert await _state(router, item, 2) == [(0, 0, 1), (1, 1, 0)]


async def test_a_dedup_entry_of_another_order_is_left_alone(router: ShardRouter, item: int) -> None:
    order, second, borrowing = (str(uuid.uuid4()) for _ in range(3))
    # The buyer bought again once Redis forgot their order: the database refuses one of the two.
    await router.load_shard(item, 0, 1, [(order, 7), (second, 7)], [(7, second)])
    assert await reassert_order(router, item, 1, 0, 7, order) == Reasserted(P, Restored.OTHER)
    assert await router.buyer_order(item, 1, 7) == second
    # A pending borrow of this very order counts as its entry.
    await router.client.hset(shard_keys(item, 0).buyers, "8", f"~123~{borrowing}")
    found = await reassert_order(router, item, 1, 0, 8, borrowing)
    assert found.buyer is P


async def test_a_shard_not_loaded_is_left_to_its_load(router: ShardRouter, item: int) -> None:
    order = str(uuid.uuid4())
    missing = Reasserted(Restored.NOT_LOADED, Restored.NOT_LOADED)
    assert await reassert_order(router, item, 1, 0, 7, order) == missing
    assert await router.client.exists(*shard_keys(item, 0)) == 0


async def test_forfeit_drops_the_hold_and_never_the_stock(router: ShardRouter, item: int) -> None:
    await router.load_shard(item, 0, 1, [], [])
    order = str(uuid.uuid4())
    assert (await router.reserve(item, 1, 7, order, lambda _: b"e")).outcome is Outcome.RESERVED
    assert await _state(router, item) == [(0, 1, 1)]
    assert await forfeit_order(router, item, 1, 0, 7, order) is True
    assert await forfeit_order(router, item, 1, 0, 7, order) is False
    [state] = await router.shard_states(item, 1)
    assert (state.stock, state.holds, state.buyers, state.outbox) == (0, 0, 0, 0)


# Flash voucher uses.


@pytest.fixture
async def code(voucher_store: VoucherStore) -> AsyncIterator[str]:
    code = f"reassert-{uuid.uuid4().hex[:12]}"
    yield code
    await voucher_store.router.client.delete(*voucher_keys(code))


async def _use_state(store: VoucherStore, code: str) -> tuple[int | None, int, int, int]:
    state = await store.state(code)
    customers = await store.router.client.hgetall(voucher_keys(code).customers)
    return state.remaining, state.holds, sum(int(v) for v in customers.values()), state.ended


async def test_a_forgotten_use_is_restored_once(voucher_store: VoucherStore, code: str) -> None:
    router = voucher_store.router
    await voucher_store.load(code, 2, [], [])
    order = f"ord-{uuid.uuid4().hex}"
    assert (await voucher_store.reserve(code, 5, order, 1, b"e")).remaining == 1
    assert await reassert_use(router, code, 5, order) == Reasserted(P)
    keys = voucher_keys(code)
    await router.client.hdel(keys.holds, order)
    await router.client.hdel(keys.outbox, order)
    await router.client.hdel(keys.customers, "5")
    await router.client.incr(keys.remaining)
    assert await _use_state(voucher_store, code) == (2, 0, 0, 0)

    assert await reassert_use(router, code, 5, order) == Reasserted(R)
    assert await reassert_use(router, code, 5, order) == Reasserted(P)
    assert await _use_state(voucher_store, code) == (1, 1, 1, 0)
    # Another customer's use under the orderId is not overwritten.
    assert await reassert_use(router, code, 6, order) == Reasserted(Restored.OTHER)
    # With no use left: written without one, never below 0.
    await router.client.set(keys.remaining, 0)
    other = f"ord-{uuid.uuid4().hex}"
    assert await reassert_use(router, code, 6, other) == Reasserted(U)
    assert await _use_state(voucher_store, code) == (0, 2, 2, 0)


async def test_a_forfeited_use_is_not_given_back(voucher_store: VoucherStore, code: str) -> None:
    router = voucher_store.router
    await voucher_store.load(code, 1, [], [])
    order = f"ord-{uuid.uuid4().hex}"
    assert (await voucher_store.reserve(code, 5, order, 1, b"e")).remaining == 0
    assert await forfeit_use(router, code, order) is True
    assert await forfeit_use(router, code, order) is False
    assert await _use_state(voucher_store, code) == (0, 0, 0, 1)
    assert (await voucher_store.state(code)).outbox == 0
    # The orderId ended: a retry of it takes nothing.
    retried = await voucher_store.reserve(code, 5, order, 1, b"e")
    assert retried.outcome is VoucherOutcome.ENDED
    assert await reassert_use(router, f"{code}-none", 5, order) == Reasserted(Restored.NOT_LOADED)
