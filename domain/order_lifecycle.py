"""Order state transitions in PostgreSQL, each one ``UPDATE … RETURNING`` so that two callers
racing on one order (pay vs expiry, two expiry jobs) see exactly one winner. Units go back to
Redis only after the transaction that ended the order committed."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

import asyncpg

from domain.give_back import give_back
from domain.ports import UnitReleaser

ACTIVE = ("PENDING", "PAID")  # the statuses of an order that holds its unit
# How the writer's failure_reason for a refusal for capacity begins (writer/streams.py): Redis
# had granted a unit it did not have, so that order's hold is forfeited, its unit not given back.
SOLD_OUT = "sold out"


class PayResult(enum.Enum):
    PAID = "PAID"
    EXPIRED = "EXPIRED"  # expired or cancelled: a late payment never resurrects it
    FAILED = "FAILED"
    NOT_FOUND = "NOT_FOUND"  # not in the database (maybe still in Kafka)


@dataclass(frozen=True, slots=True)
class Ended:
    """An order that just ended (expired or cancelled) and whose unit must go back."""

    order_id: str
    item_id: int
    shards: int
    unit_shard: int
    user_id: int


async def order_status(pool: asyncpg.Pool, order_id: uuid.UUID) -> asyncpg.Record | None:
    return await pool.fetchrow(
        "select id, item_id, user_id, status from flash_sale_order where id = $1", order_id
    )


async def pay(pool: asyncpg.Pool, order_id: uuid.UUID, user_id: int) -> PayResult:
    paid = await pool.fetchval(
        "update flash_sale_order set status = 'PAID', updated_at = now() "
        "where id = $1 and user_id = $2 and status = 'PENDING' and expires_at > now() "
        "returning id",
        order_id,
        user_id,
    )
    if paid is not None:
        return PayResult.PAID
    row = await order_status(pool, order_id)
    if row is None or row["user_id"] != user_id:
        return PayResult.NOT_FOUND
    if row["status"] == "PAID":
        return PayResult.PAID  # paying twice answers the same
    if row["status"] == "FAILED":
        return PayResult.FAILED
    return PayResult.EXPIRED  # EXPIRED, CANCELLED, or PENDING past its window


_END = """
with ended as (
    update flash_sale_order o set status = $1, updated_at = now()
    from flash_sale_item i
    where o.item_id = i.id and o.status = 'PENDING' and {where}
    returning o.id, o.item_id, i.shards, o.shard, o.user_id
), per_item as (
    update flash_sale_item i set sold = i.sold - n.count
    from (select item_id, count(*) as count from ended group by item_id) n
    where i.id = n.item_id
)
select * from ended
"""
_CANCEL = _END.format(where="o.id = $2 and o.user_id = $3")
# Due: unpaid past the payment window. The one predicate of what expiry ends and of what its dry
# run counts, so the two cannot disagree.
_DUE = "status = 'PENDING' and expires_at <= now()"
_EXPIRE = _END.format(
    where=f"""o.id in (
        select id from flash_sale_order where {_DUE}
        order by expires_at limit $2 for update skip locked)"""
)
_DUE_PER_ITEM = f"""
select item_id, count(*) as due from flash_sale_order where {_DUE}
group by item_id order by item_id
"""


def _ended(rows: list[asyncpg.Record]) -> list[Ended]:
    return [Ended(str(r["id"]), r["item_id"], r["shards"], r["shard"], r["user_id"]) for r in rows]


async def cancel(pool: asyncpg.Pool, order_id: uuid.UUID, user_id: int) -> Ended | None:
    """PENDING → CANCELLED and ``sold`` down by one, in one statement; None if not pending."""
    rows = await pool.fetch(_CANCEL, "CANCELLED", order_id, user_id)
    ended = _ended(rows)
    return ended[0] if ended else None


async def expire_due(pool: asyncpg.Pool, limit: int = 1000) -> list[Ended]:
    """PENDING past the window → EXPIRED, ``sold`` down, in one statement (skip-locked rows
    let two expiry jobs run at once without ending an order twice)."""
    return _ended(await pool.fetch(_EXPIRE, "EXPIRED", limit))


async def due_per_item(pool: asyncpg.Pool) -> dict[int, int]:
    """Item → its orders that ``expire_due`` would end now; reads only."""
    return {r["item_id"]: r["due"] for r in await pool.fetch(_DUE_PER_ITEM)}


async def release_ended(router: UnitReleaser, ended: list[Ended]) -> list[Ended]:
    """After the commit: give each ended order's unit back in Redis (idempotent), and forget the
    buyer's dedup entry. Returns the orders whose unit went back now."""
    return await give_back(
        ended,
        lambda o: router.release(o.item_id, o.shards, o.unit_shard, o.user_id, o.order_id),
    )


async def release_units(router: UnitReleaser, ended: list[Ended]) -> set[int]:
    """release_ended; returns the items that got stock back."""
    return {order.item_id for order in await release_ended(router, ended)}
