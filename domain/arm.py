"""Arm / warm-up: load each item's stock shards from the database.

Each shard gets its share of ``quantity − held``, where held counts every unit a live order has:
the active orders in the database (PENDING, PAID) and the holds Redis already has that the
writer has not stored yet. Loading from ``quantity`` alone would resell units after a Redis
restart; this never does. The hold records and buyers' dedup entries are rebuilt with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from domain.errors import NotReady
from shard_router import ShardRouter, home_shard


@dataclass(frozen=True, slots=True)
class ArmedItem:
    item_id: int
    shards: int
    units: int
    held: int


async def check_cluster_ready(router: ShardRouter) -> None:
    """Refuse to open a sale until every primary has a replica in sync and every script."""
    lagging = [node for node, ok in (await router.replicas_in_sync()).items() if not ok]
    if lagging:
        raise NotReady(f"primaries without an in-sync replica: {', '.join(sorted(lagging))}")
    await router.load_scripts()
    if not await router.scripts_loaded_everywhere():
        raise NotReady("scripts are not loaded on every primary")


async def arm_item(pool: asyncpg.Pool, router: ShardRouter, item_id: int) -> ArmedItem:
    item = await pool.fetchrow(
        "select quantity, shards from flash_sale_item where id = $1", item_id
    )
    if item is None:
        raise NotReady(f"item {item_id} does not exist")
    shards: int = item["shards"]
    for k in range(shards):
        if await router.outbox(item_id, k):
            raise NotReady(f"item {item_id} shard {k} has orders in flight (outbox not empty)")
    active = await pool.fetch(
        "select id::text as id, user_id, shard from flash_sale_order "
        "where item_id = $1 and status in ('PENDING', 'PAID')",
        item_id,
    )
    holds: dict[str, tuple[int, int]] = {r["id"]: (r["user_id"], r["shard"]) for r in active}
    for k in range(shards):
        for order_id, user_id in (await router.holds(item_id, k)).items():
            holds.setdefault(order_id, (user_id, k))  # accepted, not yet written by the writer
    units = max(0, item["quantity"] - len(holds))
    base, extra = divmod(units, shards)
    for k in range(shards):
        shard_holds = [(o, u) for o, (u, s) in holds.items() if s == k]
        buyers = [(u, o) for o, (u, _) in holds.items() if home_shard(u, shards) == k]
        await router.load_shard(item_id, k, base + (1 if k < extra else 0), shard_holds, buyers)
    return ArmedItem(item_id, shards, units, len(holds))


async def arm_sale(
    pool: asyncpg.Pool, router: ShardRouter, sale_id: int, *, require_replicas: bool = True
) -> list[ArmedItem]:
    if require_replicas:
        await check_cluster_ready(router)
    item_ids = [
        r["id"]
        for r in await pool.fetch(
            "select id from flash_sale_item where sale_id = $1 order by id", sale_id
        )
    ]
    if not item_ids:
        raise NotReady(f"sale {sale_id} does not exist or has no items")
    armed = [await arm_item(pool, router, item_id) for item_id in item_ids]
    await pool.execute("update flash_sale set armed_at = now() where id = $1", sale_id)
    return armed
