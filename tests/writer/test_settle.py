"""writer/settle.py against the real stack, for the race no batch can stage on demand: a row that
ends (a cancel, an expiry, which release its hold) between the writer's commit and its
re-assert. The re-assert writes the hold back; the settler then finds the row ended and gives
the hold up again as it took it, so the ender's release is not undone."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from kernel.events import OrderPlaced
from kernel.ids import new_order_id
from shard_router import ShardRouter, shard_keys
from tests.support.writer import make_item
from writer import ORDERS, Sink, Written
from writer.retry import Backoff
from writer.settle import Settler
from writer.stream import Holder

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

USER = 7


@pytest.fixture
async def item(db: asyncpg.Pool, router: ShardRouter) -> AsyncIterator[int]:
    item = await make_item(db, quantity=2, shards=1)
    yield item
    await router.client.delete(*shard_keys(item, 0))


async def _ended_order(db: asyncpg.Pool, item: int, status: str) -> Holder:
    """A row as the writer (and, for an ended one, the ender) left it: an active row counts in
    ``sold``, or the expiry job would later take a unit the item never had."""
    order_id = new_order_id(item)
    async with db.acquire() as conn, conn.transaction():
        await conn.execute(
            "insert into flash_sale_order (id, item_id, user_id, shard, status, created_at,"
            " expires_at) values ($1, $2, $3, 0, $4, now(), now() + interval '1 hour')",
            uuid.UUID(order_id),
            item,
            USER,
            status,
        )
        if status in ("PENDING", "PAID"):
            await conn.execute("update flash_sale_item set sold = sold + 1 where id = $1", item)
    return Holder(order_id, item, USER, 0)


async def _settle(db: asyncpg.Pool, router: ShardRouter, item: int, holder: Holder) -> None:
    settler: Settler[OrderPlaced] = Settler(Sink(db, ORDERS), router, Backoff())
    await settler.settle(Written([], {item: {"shards": 1}}, [holder]))


@pytest.mark.parametrize("status", ["CANCELLED", "EXPIRED"])
async def test_a_row_ended_before_its_re_assert_keeps_its_unit_released(
    status: str, db: asyncpg.Pool, router: ShardRouter, item: int
) -> None:
    await router.load_shard(item, 0, 2, [], [])  # the ender released the hold: its unit is back
    holder = await _ended_order(db, item, status)
    await _settle(db, router, item, holder)
    [state] = await router.shard_states(item, 1)
    assert (state.stock, state.holds, state.buyers) == (2, 0, 0)


async def test_one_re_asserted_without_a_unit_takes_none_back(
    db: asyncpg.Pool, router: ShardRouter, item: int
) -> None:
    await router.load_shard(item, 0, 0, [], [])  # and its unit has been sold again since
    holder = await _ended_order(db, item, "CANCELLED")
    await _settle(db, router, item, holder)
    [state] = await router.shard_states(item, 1)
    assert (state.stock, state.holds, state.buyers) == (0, 0, 0)


async def test_one_still_active_keeps_what_was_restored(
    db: asyncpg.Pool, router: ShardRouter, item: int
) -> None:
    await router.load_shard(item, 0, 2, [], [])
    holder = await _ended_order(db, item, "PENDING")
    await _settle(db, router, item, holder)
    await _settle(db, router, item, holder)  # a replay takes no second unit
    [state] = await router.shard_states(item, 1)
    assert (state.stock, state.holds, state.buyers) == (1, 1, 1)
    assert await router.holds(item, 0) == {holder.order_id: USER}
