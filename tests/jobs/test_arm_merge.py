"""Arming merges with Redis (domain/warm_up.py, lua/load.lua): buyers reserving while an item is
armed again, in the same process and really at once on the cluster, keep every hold, every
dedup entry and every unit."""

from __future__ import annotations

import asyncio
import random

import asyncpg
import pytest

from domain.arm import arm_item
from domain.errors import SaleLive
from jobs.reconcile import reconcile
from kernel.ids import new_order_id
from kernel.settings import Settings
from shard_router import Outcome, ShardRouter, ShardUnavailable, VoucherStore, shard_keys
from tests.jobs.sales import make_item, store_order, users

pytestmark = pytest.mark.integration

QUANTITY, SHARDS, BUYERS, ARMS = 60, 4, 80, 10
NOT_AN_EVENT = b"jobs test: no relay sends this"  # other tests' gateways relay live outboxes


async def _reserve(router: ShardRouter, item: int, user: int) -> str | None:
    """The buyer's orderId once Redis confirmed their unit; a 503 is retried, as a client does."""
    order_id = new_order_id(item)
    for _ in range(50):
        try:
            res = await router.reserve(item, SHARDS, user, order_id, lambda _: NOT_AN_EVENT)
        except ShardUnavailable:
            await asyncio.sleep(0.05)
            continue
        return order_id if res.outcome in (Outcome.RESERVED, Outcome.REPLAY) else None
    raise AssertionError(f"buyer {user}: Redis never confirmed")


async def test_arming_a_paused_item_while_buyers_reserve_keeps_every_hold(
    live_stack: Settings, db: asyncpg.Pool, router: ShardRouter
) -> None:
    item = await make_item(db, QUANTITY, SHARDS, paused=True)
    await arm_item(db, router, item)
    rng = random.Random(item)
    won: dict[str, int] = {}

    async def buyer(user: int) -> None:
        await asyncio.sleep(rng.random())
        order_id = await _reserve(router, item, user)
        if order_id is not None:
            won[order_id] = user

    async def arms() -> None:
        for _ in range(ARMS):
            await arm_item(db, router, item)
            await asyncio.sleep(0.1)

    await asyncio.gather(arms(), *(buyer(next(users)) for _ in range(BUYERS)))

    assert len(won) == QUANTITY  # every unit sold, none twice
    holds: dict[str, int] = {}
    for k in range(SHARDS):
        holds.update(await router.holds(item, k))
    assert holds == won
    for order_id, user in won.items():
        assert await router.buyer_order(item, SHARDS, user) == order_id
    [report] = await reconcile(live_stack, db, router, [item])
    assert (report.units_left, report.holds, report.lost, report.ghosts) == (0, QUANTITY, 0, 0)
    assert report.drift == 0


async def test_arming_again_restores_what_redis_lost_and_keeps_what_it_has(
    live_stack: Settings, db: asyncpg.Pool, router: ShardRouter
) -> None:
    item = await make_item(db, 10, 2, paused=True)
    await arm_item(db, router, item)
    kept = await _reserve(router, item, next(users))  # in flight: not in the database
    assert kept is not None
    stored_user = next(users)
    stored = await _reserve(router, item, stored_user)
    assert stored is not None
    [unit_shard] = [k for k in range(2) if stored in await router.holds(item, k)]
    await store_order(db, item, stored_user, unit_shard, order_id=stored)
    # A failover forgets the stored order's hold and its buyer entry, and hands its unit out.
    keys = shard_keys(item, unit_shard)
    await router.client.hdel(keys.orders, stored)
    await router.client.incr(keys.stock)
    await router.client.hdel(shard_keys(item, stored_user % 2).buyers, str(stored_user))

    armed = await arm_item(db, router, item)
    assert (armed.units, armed.held) == (8, 2)
    assert stored in await router.holds(item, unit_shard)
    assert await router.buyer_order(item, 2, stored_user) == stored
    [report] = await reconcile(live_stack, db, router, [item])
    assert (report.units_left, report.holds, report.lost, report.drift) == (8, 2, 0, 0)


async def test_an_item_on_sale_is_not_armed_again(
    live_stack: Settings, db: asyncpg.Pool, router: ShardRouter
) -> None:
    item = await make_item(db, 10, 2)
    with pytest.raises(SaleLive, match=f"item {item} is on sale now"):
        await arm_item(db, router, item)
    assert SaleLive.code == "SALE_LIVE"
    ended = await make_item(db, 10, 2, ended_s_ago=1)
    assert (await arm_item(db, router, ended)).units == 10  # closed: arming is safe


async def test_a_voucher_armed_again_keeps_its_holds_and_recounts_its_customers(
    voucher_store: VoucherStore,
) -> None:
    code = f"JOBS-{random.randrange(10**12)}"
    await voucher_store.load(code, 3, [], [])
    first = await voucher_store.reserve(code, 1, "o1", 2, NOT_AN_EVENT)
    second = await voucher_store.reserve(code, 1, "o2", 2, NOT_AN_EVENT)
    assert first.remaining == 2 and second.remaining == 1
    # A load from a database with o1 and a lost o3 of customer 2 (1 use left), which o2 beat.
    await voucher_store.load(code, 1, [("o1", 1), ("o3", 2)], [])
    state = await voucher_store.state(code)
    assert (state.remaining, state.holds, state.customers) == (0, 3, 2)
    assert await voucher_store.holds(code) == {"o1": 1, "o2": 1, "o3": 2}
    refused = await voucher_store.reserve(code, 1, "o4", 2, NOT_AN_EVENT)
    assert refused.outcome.name == "ALREADY_USED"  # customer 1's count is 2: o1 and o2
