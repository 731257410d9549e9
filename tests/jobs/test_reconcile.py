"""Reconciliation repairs Redis from the database only while the item is paused."""

from __future__ import annotations

import asyncpg
import pytest

from domain.arm import arm_item
from jobs.reconcile import reconcile
from kernel.settings import Settings
from shard_router import ShardRouter, shard_keys
from tests.jobs.sales import make_item

pytestmark = pytest.mark.integration


async def test_fix_rebuilds_a_drifted_item_only_while_paused(
    live_stack: Settings, db: asyncpg.Pool, router: ShardRouter
) -> None:
    item = await make_item(db, 40, 4, paused=True)
    await arm_item(db, router, item)
    await db.execute("update flash_sale_item set paused = false where id = $1", item)
    [clean] = await reconcile(live_stack, db, router, [item])
    assert clean.drift == 0 and clean.units_left == 40
    await router.client.decr(shard_keys(item, 2).stock)  # a unit vanishes from Redis
    [drifted] = await reconcile(live_stack, db, router, [item], fix=True)
    assert drifted.unit_drift == 1, "an unpaused item is reported, not repaired"
    await db.execute("update flash_sale_item set paused = true where id = $1", item)
    [still] = await reconcile(live_stack, db, router, [item], fix=True, rebuild=False)
    assert still.unit_drift == 1, "only what is safe live, as reconcile --every does"
    [fixed] = await reconcile(live_stack, db, router, [item], fix=True)
    assert fixed.drift == 0 and fixed.units_left == 40
    assert [s.stock for s in await router.shard_states(item, 4)] == [10, 10, 10, 10]
