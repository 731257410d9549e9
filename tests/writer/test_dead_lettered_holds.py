"""An event the writer dead-letters with no row to store (undecodable here: poison) leaves a hold in
Redis that no order, outbox entry or Kafka message accounts for any more. The writer records its
orderId (its Kafka key), so reconciliation releases that hold once, its unit or use back on
sale, instead of counting a ghost for ever; a second repair gives nothing back again. Real
Redis, Kafka, PostgreSQL and writer; the hold and the event are made as a gateway makes them,
with the event's bytes broken."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from domain.vouchers import Outcome as UseOutcome
from jobs.reconcile import reconcile_item, repair_item
from jobs.voucher_reconcile import reconcile_voucher, repair_voucher
from kernel.ids import new_order_id
from kernel.settings import Settings
from shard_router import Outcome, ShardRouter, VoucherStore, shard_keys, voucher_keys
from tests.support.kafka import admin_client, create_topics, delete_topics
from tests.support.writer import Topics, drain, make_item, produce, read_all, topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

POISON = b"\xff not an event"
SHARDS = 2


@pytest.fixture
async def t(live_stack: Settings) -> AsyncIterator[Topics]:
    async with topics(live_stack) as made:
        yield made


async def test_a_poison_orders_hold_is_released_once_by_reconciliation(
    t: Topics, db: asyncpg.Pool, router: ShardRouter
) -> None:
    item = await make_item(db, quantity=2, shards=SHARDS)
    for shard in range(SHARDS):
        await router.load_shard(item, shard, 1, [], [])
    user = uuid.uuid4().int % 10**12 + 10**13
    order_id = new_order_id(item)
    try:
        held = await router.reserve(item, SHARDS, user, order_id, lambda shard: POISON)
        assert held.outcome is Outcome.RESERVED
        # Delivered as the relay delivers it: sent under its orderId, then out of the outbox.
        await produce(t.cfg, t.orders, [(order_id.encode(), POISON, 0)])
        await router.ack_outbox(item, held.unit_shard, [order_id])
        await drain(dataclasses.replace(t.cfg, writer_streams=("orders",)))
        letters = await read_all(t.cfg, t.deadletter, expect=1)
        assert [x["reason"].split(":")[0] for x in letters] == ["undecodable"]

        report = await reconcile_item(db, router, item, kafka_lag=0)
        # Before: (1, 0, 0, 1) — a ghost, drift, and the unit held for good.
        assert (report.holds, len(report.stale), report.in_flight, report.ghosts) == (1, 1, 0, 0)
        assert await repair_item(t.cfg, db, router, report, rebuild=False)
        after = await reconcile_item(db, router, item, kafka_lag=0)
        assert (after.holds, after.units_left, after.drift) == (0, 2, 0)
        assert not await repair_item(t.cfg, db, router, after, rebuild=False)  # once
        assert (await reconcile_item(db, router, item, kafka_lag=0)).units_left == 2
    finally:
        for k in range(SHARDS):
            await router.client.delete(*shard_keys(item, k))


async def test_a_poison_voucher_uses_hold_is_released_once_by_reconciliation(
    t: Topics, db: asyncpg.Pool, voucher_store: VoucherStore
) -> None:
    code = f"DLQ-{uuid.uuid4().hex[:16]}"
    now = dt.datetime.now(dt.UTC)
    await db.execute(
        "insert into voucher (code, discount_amount, total_limit, starts_at, ends_at, is_flash)"
        " values ($1, 100, 3, $2, $3, true)",
        code,
        now - dt.timedelta(minutes=1),
        now + dt.timedelta(hours=1),
    )
    topic = f"test.vouchers.{uuid.uuid4().hex[:12]}"
    admin = admin_client(t.cfg)
    create_topics(admin, {topic: 1})
    cfg = dataclasses.replace(
        t.cfg,
        vouchers_topic=topic,
        voucher_writer_group=f"test-vouchers-{uuid.uuid4().hex[:12]}",
        writer_streams=("vouchers",),
    )
    order_id = f"order-{uuid.uuid4().hex}"
    try:
        await voucher_store.load(code, 3, [], [])
        use = await voucher_store.reserve(code, 7, order_id, 1, POISON)
        assert use.outcome is UseOutcome.RESERVED
        await produce(cfg, topic, [(order_id.encode(), POISON, 0)])
        await voucher_store.ack_outbox(code, [order_id])
        await drain(cfg)
        assert len(await read_all(cfg, cfg.deadletter_topic, expect=1)) == 1

        report = await reconcile_voucher(db, voucher_store, code, kafka_lag=0)
        assert (report.remaining, len(report.stale), report.ghosts) == (2, 1, 0)  # before: a ghost
        assert await repair_voucher(cfg, voucher_store, report)
        after = await reconcile_voucher(db, voucher_store, code, kafka_lag=0)
        assert (after.remaining, len(after.stale), after.drift) == (3, 0, 0)
        assert not await repair_voucher(cfg, voucher_store, after)  # once
    finally:
        await voucher_store.router.client.delete(*voucher_keys(code))
        delete_topics(admin, [topic])
