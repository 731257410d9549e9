"""An order PostgreSQL refuses outright (SQLSTATE class 23 here: a CHECK constraint it breaks)
is settled like any refusal that is not for capacity: stored FAILED when the database takes
that, its hold and unit given back, its outbox entry dropped, dead-lettered once; so the outbox
relay has nothing to send again and reconciliation counts nothing in flight for it.

The refusal is PostgreSQL's own: a CHECK constraint added for the test's one buyer (NOT VALID,
so no existing row is checked, and no other test's buyer is affected), dropped after it.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest

from gateway.outbox import Outbox, relay_once
from gateway.outboxes import _ItemShards
from gateway.producer import OrderProducer
from jobs.reconcile import reconcile_item
from kernel.events import OrderPlaced, encode
from kernel.ids import new_order_id
from kernel.round_robin import RoundRobin
from kernel.settings import Settings
from shard_router import Outcome, ShardRouter, shard_keys
from tests.support.writer import Topics, drain, make_item, order, produce, read_all, rows, topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SHARDS = 2
LOADED = [1, 1]


@pytest.fixture
async def t(live_stack: Settings) -> AsyncIterator[Topics]:
    async with topics(live_stack) as made:
        yield made


@asynccontextmanager
async def refused_for(db: asyncpg.Pool, user: int, *, even_failed: bool) -> AsyncIterator[None]:
    """flash_sale_order refuses rows of ``user`` (only those not FAILED, unless
    ``even_failed``) for the block."""
    name = f"test_refuse_{uuid.uuid4().hex[:12]}"
    allowed = "" if even_failed else " OR status = 'FAILED'"
    await db.execute(
        f"ALTER TABLE flash_sale_order ADD CONSTRAINT {name}"
        f" CHECK (user_id <> {user}{allowed}) NOT VALID"
    )
    try:
        yield
    finally:
        await db.execute(f"ALTER TABLE flash_sale_order DROP CONSTRAINT {name}")


async def _bought(router: ShardRouter, item: int, user: int) -> OrderPlaced:
    """The buyer's purchase as the gateway makes it: a unit held, the event in its outbox."""
    order_id = new_order_id(item)

    def event(shard: int) -> OrderPlaced:
        return order(item, user, shards=SHARDS, shard=shard, order_id=order_id)

    got = await router.reserve(item, SHARDS, user, order_id, lambda k: encode(event(k)))
    assert got.outcome is Outcome.RESERVED
    return event(got.unit_shard)


async def _relayed(cfg: Settings, router: ShardRouter, item: int) -> int:
    """One round of the gateways' outbox relay over the item's shards, every entry old enough:
    how many it sent."""
    producer = OrderProducer(cfg)
    producer.start()
    try:
        places = [(item, k) for k in range(SHARDS)]
        outbox = Outbox(
            "outbox", cfg.orders_topic, _ItemShards(router), lambda: places, OrderPlaced
        )
        return await relay_once(outbox, producer, RoundRobin(100), 0)
    finally:
        await producer.close()


@pytest.mark.parametrize("even_failed", [False, True], ids=["stored-failed", "not-even-failed"])
async def test_an_order_the_database_rejects_gives_its_unit_back_and_leaves_nothing_to_relay(
    t: Topics, db: asyncpg.Pool, router: ShardRouter, even_failed: bool
) -> None:
    item = await make_item(db, quantity=sum(LOADED), shards=SHARDS)
    for shard, units in enumerate(LOADED):
        await router.load_shard(item, shard, units, [], [])
    user = uuid.uuid4().int % 10**12 + 10**13
    try:
        bought = await _bought(router, item, user)
        assert bought.order_id in await router.outbox(item, bought.shard)
        async with refused_for(db, user, even_failed=even_failed):
            await produce(t.cfg, t.orders, [(bought.order_id.encode(), encode(bought), 0)])
            await drain(t.cfg)

            stored = await rows(db, item)
            if even_failed:
                assert stored == {}
            else:
                assert list(stored) == [bought.order_id]
                row = stored[bought.order_id]
                assert row["status"] == "FAILED"
                assert row["failure_reason"].startswith("rejected by the database")
            # Not a refusal for capacity: the unit is back, the buyer may buy again.
            states = await router.shard_states(item, SHARDS)
            assert [(s.stock, s.holds, s.outbox, s.buyers) for s in states] == [
                (units, 0, 0, 0) for units in LOADED
            ]
            letters = await read_all(t.cfg, t.deadletter, expect=1)
            assert [x["reason"].split(":")[0] for x in letters] == ["rejected by the database"]

            # The relay finds nothing to send again, so the writer never sees it again.
            assert await _relayed(t.cfg, router, item) == 0
            await drain(t.cfg)
            assert len(await read_all(t.cfg, t.deadletter, expect=2, timeout_s=2)) == 1

        report = await reconcile_item(db, router, item, kafka_lag=0)
        assert (report.holds, report.in_flight, report.ghosts, report.drift) == (0, 0, 0, 0)
    finally:
        for k in range(SHARDS):
            await router.client.delete(*shard_keys(item, k))
