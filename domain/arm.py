"""Arm / warm-up of a sale: load each item's stock shards from the database (domain/warm_up.py).

Each shard gets its share of ``quantity − held``, where held counts every unit a live order has:
the active orders in the database (PENDING, PAID) and the holds Redis already has that the
database does not count (not stored by the writer yet, or of an ended order). The active orders'
buyer entries are added on their home shards where missing.

An item on sale now (its sale armed and open, the item not paused) is not armed again: pause it
first (SaleLive, 409 SALE_LIVE).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import asyncpg

from domain.errors import NotReady, SaleLive
from domain.order_lifecycle import SOLD_OUT
from domain.ports import ArmableShards, ClusterReadiness, ShardLoader
from domain.warm_up import Count, Hold, Stored, warm_up
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


# By the database's clock, as the gateways' sale window is.
_ON_SALE = """
select i.id from flash_sale_item i join flash_sale s on s.id = i.sale_id
where i.id = any($1::bigint[]) and s.armed_at is not null and not i.paused
  and s.starts_at <= now() and now() < s.ends_at
order by i.id
"""


async def refuse_if_on_sale(pool: asyncpg.Pool, item_ids: list[int]) -> None:
    """SaleLive when any of these items is on sale now: armed, open, not paused."""
    live = [r["id"] for r in await pool.fetch(_ON_SALE, item_ids)]
    if live:
        which = ", ".join(map(str, live))
        raise SaleLive(f"item {which} is on sale now (open and not paused): pause it first")


# The active orders, and those refused for capacity.
_STORED = """
select id::text as id, user_id, shard, status = 'FAILED' as refused from flash_sale_order
where item_id = $1
  and (status in ('PENDING', 'PAID') or (status = 'FAILED' and starts_with(failure_reason, $2)))
"""


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

    async def holds(self, place: int) -> Mapping[str, int]:
        return await self.router.holds(self.item_id, place)

    async def counts(self) -> Mapping[int, Count]:
        states = await self.router.shard_states(self.item_id, self.shards)
        return {state.shard: Count(state.stock, state.holds) for state in states}

    async def stored(self) -> Stored[int]:
        rows = await self.pool.fetch(_STORED, self.item_id, SOLD_OUT)
        active = [Hold(r["id"], r["user_id"], r["shard"]) for r in rows if not r["refused"]]
        # A Redis hold of an ended order is kept as if in flight, and reconciliation releases
        # it as stale (or forfeits it: one refused for capacity, counted as unbacked).
        unbacked = frozenset(r["id"] for r in rows if r["refused"])
        return Stored(self.quantity, len(active), active, unbacked)

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
    await refuse_if_on_sale(pool, [item_id])
    warmed = await warm_up(_ItemShards(pool, router, item_id, item["quantity"], item["shards"]))
    return ArmedItem(item_id, item["shards"], warmed.units, warmed.active + warmed.in_flight)


async def arm_sale(
    pool: asyncpg.Pool, router: ArmableShards, sale_id: int, *, require_replicas: bool = True
) -> list[ArmedItem]:
    item_ids = [
        r["id"]
        for r in await pool.fetch(
            "select id from flash_sale_item where sale_id = $1 order by id", sale_id
        )
    ]
    if not item_ids:
        raise NotReady(f"sale {sale_id} does not exist or has no items")
    await refuse_if_on_sale(pool, item_ids)  # before any item is touched
    if require_replicas:
        await check_cluster_ready(router)
    armed = [await arm_item(pool, router, item_id) for item_id in item_ids]
    await pool.execute("update flash_sale set armed_at = now() where id = $1", sale_id)
    return armed
