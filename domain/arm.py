"""Arm / warm-up of a sale: load each item's stock shards from the database (domain/warm_up.py).

Each shard gets its share of ``quantity − held``, where held counts every unit a live order has:
the active orders in the database (PENDING, PAID) and the holds Redis already has that the
writer has not stored yet. The buyers' dedup entries are rebuilt on their home shards.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import asyncpg

from domain.errors import NotReady
from domain.ports import ArmableShards, ClusterReadiness, ShardLoader
from domain.warm_up import Hold, Stored, warm_up
from kernel.sharding import home_shard


@dataclass(frozen=True, slots=True)
class ArmedItem:
    item_id: int
    shards: int
    units: int
    held: int


async def check_cluster_ready(router: ClusterReadiness) -> None:
    """Refuse to open a sale until every primary has a replica in sync and every script."""
    lagging = [node for node, ok in (await router.replicas_in_sync()).items() if not ok]
    if lagging:
        raise NotReady(f"primaries without an in-sync replica: {', '.join(sorted(lagging))}")
    await router.load_scripts()
    if not await router.scripts_loaded_everywhere():
        raise NotReady("scripts are not loaded on every primary")


@dataclass(frozen=True, slots=True)
class _ItemShards:
    """An item's shards as warm-up's Stock: the places are the shard numbers."""

    pool: asyncpg.Pool
    router: ShardLoader
    item_id: int
    quantity: int
    shards: int

    @property
    def places(self) -> range:
        return range(self.shards)

    def busy(self, place: int) -> str:
        return f"item {self.item_id} shard {place} has orders in flight (outbox not empty)"

    async def outbox(self, place: int) -> Mapping[str, bytes]:
        return await self.router.outbox(self.item_id, place)

    async def holds(self, place: int) -> Mapping[str, int]:
        return await self.router.holds(self.item_id, place)

    async def stored(self) -> Stored[int]:
        rows = await self.pool.fetch(
            "select id::text as id, user_id, shard from flash_sale_order "
            "where item_id = $1 and status in ('PENDING', 'PAID')",
            self.item_id,
        )
        active = [Hold(r["id"], r["user_id"], r["shard"]) for r in rows]
        # Only the active orders are read: a Redis hold of an ended one is kept as if in flight,
        # and reconciliation releases it as stale.
        known = frozenset(hold.order_id for hold in active)
        return Stored(self.quantity, len(active), active, known)

    async def load(self, place: int, units: int, holds: list[Hold[int]]) -> None:
        await self.router.load_shard(
            self.item_id,
            place,
            units,
            [(h.order_id, h.owner) for h in holds if h.place == place],
            [(h.owner, h.order_id) for h in holds if home_shard(h.owner, self.shards) == place],
        )


async def arm_item(pool: asyncpg.Pool, router: ShardLoader, item_id: int) -> ArmedItem:
    item = await pool.fetchrow(
        "select quantity, shards from flash_sale_item where id = $1", item_id
    )
    if item is None:
        raise NotReady(f"item {item_id} does not exist")
    warmed = await warm_up(_ItemShards(pool, router, item_id, item["quantity"], item["shards"]))
    return ArmedItem(item_id, item["shards"], warmed.units, warmed.active + warmed.in_flight)


async def arm_sale(
    pool: asyncpg.Pool, router: ArmableShards, sale_id: int, *, require_replicas: bool = True
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
