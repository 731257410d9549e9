"""Reconciliation repairs Redis from the database only while the item is paused."""

from __future__ import annotations

import datetime as dt

import asyncpg
import pytest

from domain.arm import arm_item
from jobs.reconcile import reconcile
from kernel.settings import Settings
from shard_router import ShardRouter, shard_keys

pytestmark = pytest.mark.integration


async def test_fix_rebuilds_a_drifted_item_only_while_paused(
    live_stack: Settings, db: asyncpg.Pool, router: ShardRouter
) -> None:
    now = dt.datetime.now(dt.UTC)
    sale = await db.fetchval(
        "insert into flash_sale (name, starts_at, ends_at, armed_at) "
        "values ('fix', $1, $2, $1) returning id",
        now,
        now + dt.timedelta(hours=1),
    )
    item = await db.fetchval(
        "insert into flash_sale_item (sale_id, product_id, price, quantity,"
        " shards) values ($1, 'p', 1, 40, 4) returning id",
        sale,
    )
    await arm_item(db, router, item)
    [clean] = await reconcile(live_stack, db, router, [item])
    assert clean.drift == 0 and clean.units_left == 40
    await router.client.decr(shard_keys(item, 2).stock)  # a unit vanishes from Redis
    [drifted] = await reconcile(live_stack, db, router, [item], fix=True)
    assert drifted.unit_drift == 1, "an unpaused item is reported, not repaired"
    await db.execute("update flash_sale_item set paused = true where id = $1", item)
    [fixed] = await reconcile(live_stack, db, router, [item], fix=True)
    assert fixed.drift == 0 and fixed.units_left == 40
