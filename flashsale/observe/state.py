"""A sale's state now, per item and shard: the units left, holds and outbox in Redis, and the
orders in PostgreSQL (sold: PENDING or PAID; FAILED counted apart)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shard_router import ShardRouter, ShardState

LATEST_SALE = """
select id from flash_sale where armed_at is not null
order by (starts_at <= now() and now() < ends_at) desc, armed_at desc limit 1
"""
SALE = "select id, name, starts_at, ends_at from flash_sale where id = $1"
ITEMS = """
select id, product_id, quantity, sold, shards, paused from flash_sale_item
where sale_id = $1 order by id
"""
# Per item and shard (the shard the unit came from): orders holding a unit, and refused ones.
ORDERS = """
select item_id, shard,
       count(*) filter (where status in ('PENDING', 'PAID')) as sold,
       count(*) filter (where status = 'FAILED') as failed
from flash_sale_order where item_id = any($1::bigint[]) group by item_id, shard
"""


@dataclass(frozen=True, slots=True)
class ShardView:
    shard: int
    node: str
    left: int | None  # None: Redis did not answer
    holds: int | None
    outbox: int | None
    sold_db: int
    failed_db: int


@dataclass(frozen=True, slots=True)
class ItemView:
    item_id: int
    product_id: str
    quantity: int
    sold: int  # flash_sale_item.sold: units held by PENDING or PAID orders
    paused: bool
    shards: list[ShardView] = field(default_factory=list)

    @property
    def left(self) -> int | None:
        known = [s.left for s in self.shards]
        return None if None in known else sum(s or 0 for s in known)

    @property
    def holds(self) -> int | None:
        known = [s.holds for s in self.shards]
        return None if None in known else sum(s or 0 for s in known)

    @property
    def failed_db(self) -> int:
        return sum(s.failed_db for s in self.shards)


@dataclass(frozen=True, slots=True)
class SaleView:
    sale_id: int
    name: str
    items: list[ItemView]
    redis_error: str = ""


class NoSale(LookupError):
    """No such sale, or no armed sale at all."""


async def pick_sale(pool: Any, sale_id: int | None) -> int:
    """The sale asked for, else the armed one on sale now, else the one armed last."""
    if sale_id is not None:
        if await pool.fetchval("select 1 from flash_sale where id = $1", sale_id) is None:
            raise NoSale(f"sale {sale_id} does not exist")
        return sale_id
    found = await pool.fetchval(LATEST_SALE)
    if found is None:
        raise NoSale("no armed sale yet (flashsale sale arm SALE_ID)")
    return int(found)


async def sale_view(pool: Any, router: ShardRouter, sale_id: int) -> SaleView:
    sale = await pool.fetchrow(SALE, sale_id)
    if sale is None:
        raise NoSale(f"sale {sale_id} does not exist")
    rows = await pool.fetch(ITEMS, sale_id)
    orders = {
        (r["item_id"], r["shard"]): (r["sold"], r["failed"])
        for r in await pool.fetch(ORDERS, [r["id"] for r in rows])
    }
    items, error = [], ""
    for row in rows:
        states: dict[int, ShardState] = {}
        try:
            states = {s.shard: s for s in await router.shard_states(row["id"], row["shards"])}
        except Exception as exc:  # noqa: BLE001 - shown, and the next tick asks again
            error = f"Redis: {exc}"
        shards = []
        for k in range(row["shards"]):
            state = states.get(k)
            sold, failed = orders.get((row["id"], k), (0, 0))
            shards.append(
                ShardView(
                    k,
                    state.node if state else "?",
                    state.stock if state else None,
                    state.holds if state else None,
                    state.outbox if state else None,
                    sold,
                    failed,
                )
            )
        items.append(
            ItemView(
                row["id"], row["product_id"], row["quantity"], row["sold"], row["paused"], shards
            )
        )
    return SaleView(sale_id, sale["name"], items, error)
