"""Sales and items made in SQL for the jobs tests, and orders as the writer would store them."""

from __future__ import annotations

import datetime as dt
import itertools
import uuid

import asyncpg

from kernel.ids import new_order_id

# Buyers of their own, far from other tests' (each test module draws from this).
users = itertools.count(uuid.uuid4().int % 10**11 * 1000 + 7 * 10**14)


async def make_item(
    db: asyncpg.Pool,
    quantity: int,
    shards: int,
    *,
    paused: bool = False,
    ended_s_ago: float | None = None,
    window_s: int = 600,
) -> int:
    """An item of an armed sale: open for the next hour, or ``ended_s_ago`` seconds ago."""
    now = dt.datetime.now(dt.UTC)
    if ended_s_ago is None:
        starts, ends = now - dt.timedelta(seconds=5), now + dt.timedelta(hours=1)
    else:
        ends = now - dt.timedelta(seconds=ended_s_ago)
        starts = ends - dt.timedelta(hours=1)
    sale = await db.fetchval(
        "insert into flash_sale (name, starts_at, ends_at, payment_window_seconds, armed_at)"
        " values ('jobs test', $1, $2, $3, $1) returning id",
        starts,
        ends,
        window_s,
    )
    item: int = await db.fetchval(
        "insert into flash_sale_item (sale_id, product_id, price, quantity, shards, paused)"
        " values ($1, 'sku', 100, $2, $3, $4) returning id",
        sale,
        quantity,
        shards,
        paused,
    )
    return item


async def store_order(
    db: asyncpg.Pool,
    item: int,
    user: int,
    shard: int,
    status: str = "PENDING",
    order_id: str | None = None,
) -> str:
    """An order row as the writer stores it (``sold`` counts it while it is active)."""
    order_id = order_id or new_order_id(item)
    now = dt.datetime.now(dt.UTC)
    async with db.acquire() as conn, conn.transaction():
        await conn.execute(
            "insert into flash_sale_order (id, item_id, user_id, shard, status, created_at,"
            " expires_at) values ($1, $2, $3, $4, $5, $6, $7)",
            uuid.UUID(order_id),
            item,
            user,
            shard,
            status,
            now,
            now + dt.timedelta(hours=1),
        )
        if status in ("PENDING", "PAID"):
            await conn.execute("update flash_sale_item set sold = sold + 1 where id = $1", item)
    return order_id
