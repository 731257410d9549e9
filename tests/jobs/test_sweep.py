"""What reconciliation repairs while buyers buy (jobs/reconcile_loop.py's rounds): a release
that failed after its order ended is retried until it goes, on a live item, once however many
sweeps run; an outbox entry no relay sends any more is delivered to Kafka, not counted in flight
forever."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import uuid

import asyncpg
import pytest

from domain.arm import arm_item
from domain.order_lifecycle import cancel, release_units
from jobs.reconcile import reconcile
from jobs.reconcile_loop import Scope, reconcile_round
from kernel.errors import ShardUnavailable
from kernel.events import OrderPlaced, encode
from kernel.ids import new_order_id
from kernel.settings import Settings
from shard_router import Outcome, ShardRouter, shard_keys
from tests.jobs.sales import make_item, store_order, users
from tests.jobs.test_arm_merge import NOT_AN_EVENT
from tests.support.kafka import scratch_topics
from tests.support.writer import read_all

pytestmark = pytest.mark.integration

QUANTITY, SHARDS = 20, 2


class _RedisDown:
    """A releaser whose Redis never answers: the release after the commit fails."""

    async def release(
        self, item_id: int, shards: int, unit_shard: int, user_id: int, order_id: str
    ) -> bool:
        raise ShardUnavailable("test", "down")


async def _live_item(db: asyncpg.Pool, router: ShardRouter, quantity: int, shards: int) -> int:
    """An item on sale now, loaded (armed while paused, then resumed)."""
    item = await make_item(db, quantity, shards, paused=True)
    await arm_item(db, router, item)
    await db.execute("update flash_sale_item set paused = false where id = $1", item)
    return item


async def _take(router: ShardRouter, item: int, shards: int, user: int) -> str | None:
    order_id = new_order_id(item)
    res = await router.reserve(item, shards, user, order_id, lambda _: NOT_AN_EVENT)
    return order_id if res.outcome is Outcome.RESERVED else None


async def test_failed_releases_are_swept_on_a_live_item_once_whatever_runs_at_once(
    live_stack: Settings, db: asyncpg.Pool, router: ShardRouter
) -> None:
    item = await _live_item(db, router, QUANTITY, SHARDS)
    stored: dict[str, int] = {}
    for _ in range(6):  # six buyers whose orders the writer stored
        user = next(users)
        order_id = await _take(router, item, SHARDS, user)
        assert order_id is not None
        [shard] = [k for k in range(SHARDS) if order_id in await router.holds(item, k)]
        await store_order(db, item, user, shard, order_id=order_id)
        stored[order_id] = user
    # Three cancel; each commit lands, and each release after it meets a Redis that is down.
    cancelled = list(stored)[:3]
    for order_id in cancelled:
        ended = await cancel(db, uuid.UUID(order_id), stored[order_id])
        assert ended is not None
        assert await release_units(_RedisDown(), [ended]) == set()  # logged, not raised
    [before] = await reconcile(live_stack, db, router, [item])
    assert {o.order_id for o in before.stale} == set(cancelled) and before.unit_drift == 0

    # Buyers keep buying while two sweeps run at once, three times over.
    rng = random.Random(item)
    won: list[str] = []

    async def buyer(user: int) -> None:
        await asyncio.sleep(rng.random() * 0.5)
        order_id = await _take(router, item, SHARDS, user)
        if order_id is not None:
            won.append(order_id)

    async def sweeps() -> None:
        for _ in range(3):
            await asyncio.gather(
                *(reconcile_round(live_stack, db, router, Scope([item], [])) for _ in range(2))
            )

    await asyncio.gather(sweeps(), *(buyer(next(users)) for _ in range(30)))
    [after] = await reconcile(live_stack, db, router, [item])
    # The 3 released units went back once each: 20 − 6 + 3 sold to the buyers, none twice.
    assert len(won) == QUANTITY - 6 + 3
    assert (len(after.stale), after.unit_drift, after.lost, after.units_left) == (0, 0, 0, 0)
    assert after.holds == 3 + len(won)
    for order_id in cancelled:  # and their buyers may buy again
        assert await router.buyer_order(item, SHARDS, stored[order_id]) is None


async def test_an_outbox_entry_no_relay_sends_is_drift_until_delivered(
    live_stack: Settings, db: asyncpg.Pool, router: ShardRouter
) -> None:
    # Ended 10 s ago with a 1 s payment window: no gateway relays its outboxes any more.
    item = await make_item(db, 5, 1, ended_s_ago=10, window_s=1)
    await arm_item(db, router, item)
    user, order_id = next(users), new_order_id(item)
    event = OrderPlaced(order_id, item, user, 0, 0, 1, 2)
    res = await router.reserve(item, 1, user, order_id, lambda _: encode(event))
    assert res.outcome is Outcome.RESERVED  # a gateway died before the Kafka ack, long ago

    topic = f"test.stuck.{uuid.uuid4().hex[:12]}"
    cfg = dataclasses.replace(
        live_stack, orders_topic=topic, writer_group=f"test-stuck-{uuid.uuid4().hex[:12]}"
    )
    with scratch_topics(cfg, {topic: 1}):
        [stuck] = await reconcile(cfg, db, router, [item])
        assert (len(stuck.stuck), stuck.in_flight, stuck.ghosts) == (1, 0, 0)
        assert stuck.drift == 1, "stuck, not in flight"
        [fixed] = await reconcile(cfg, db, router, [item], fix=True)
        assert await router.outbox(item, 0) == {}
        [sent] = await read_all(cfg, topic, 1)
        assert sent["order_id"] == order_id
        # Now on Kafka, for a writer to store (and expiry to end): in flight, no drift.
        assert (len(fixed.stuck), fixed.in_flight, fixed.drift) == (0, 1, 0)


@pytest.mark.parametrize("armed_between", [False, True])
async def test_a_hold_refused_for_capacity_is_forfeited_and_any_other_released(
    live_stack: Settings, db: asyncpg.Pool, router: ShardRouter, armed_between: bool
) -> None:
    item = await _live_item(db, router, 2, 1)
    kept, refused, sold_out = next(users), next(users), next(users)
    kept_order = await _take(router, item, 1, kept)
    refused_order = await _take(router, item, 1, refused)
    assert kept_order is not None and refused_order is not None
    await store_order(db, item, kept, 0, order_id=kept_order)
    await store_order(db, item, refused, 0, "FAILED", order_id=refused_order)
    # A unit Redis granted that it did not have (it forgot an order in a failover): a hold
    # without a unit, refused by the writer for capacity, whose forfeit never reached Redis.
    phantom = await store_order(db, item, sold_out, 0, "FAILED")
    await router.client.hset(shard_keys(item, 0).orders, phantom, str(sold_out))
    await db.execute(
        "update flash_sale_order set failure_reason = $2 where id = $1::text::uuid",
        phantom,
        f"sold out: item {item} has no unit left of 2",
    )
    if armed_between:  # arming counts the forfeit to come: the unit stays one too many
        await db.execute("update flash_sale_item set paused = true where id = $1", item)
        assert (await arm_item(db, router, item)).units == 0  # the stale hold still holds one
        await db.execute("update flash_sale_item set paused = false where id = $1", item)
    [before] = await reconcile(live_stack, db, router, [item])
    assert (len(before.stale), before.forfeit, before.unit_drift) == (2, {phantom}, -1)

    done = await reconcile_round(live_stack, db, router, Scope([item], []))
    [after] = done.items
    assert (after.units_left, after.holds, after.drift) == (1, 1, 0)  # 1 + kept's hold = 2
    assert await router.holds(item, 0) == {kept_order: kept}
