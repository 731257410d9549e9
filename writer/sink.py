"""One batch of orders into PostgreSQL, in one transaction, idempotent by orderId.

Inside the transaction, in this order:

1. lock the batch's items (``FOR UPDATE``, by id, so two writers never deadlock on them): the
   lock serialises every writer's capacity and one-active-order checks for an item;
2. an orderId already stored is a duplicate (a redelivery): nothing changes, except that an order
   stored ``FAILED`` earlier is reported again so its unit is released again (idempotent);
3. walk the new orders in batch order: refuse one whose buyer already holds an active order for
   the item, or that finds no capacity left (``quantity - sold``); accept the rest;
4. insert accepted orders ``PENDING`` and refused ones ``FAILED`` with their reason
   (``ON CONFLICT DO NOTHING``; every row must come back, or someone raced us: retry);
5. advance ``sold`` by the accepted count per item, guarded by ``sold + n <= quantity``.

A crash anywhere before the commit leaves nothing; a redelivery after it finds every orderId
stored and decides the same, so any number of passes equals one clean pass. Flash voucher uses
(from the vouchers topic) go in the same transaction by the same rules (writer/voucher_sink.py).
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from kernel.failpoints import failpoint
from writer.batch import Order, Redemption
from writer.errors import RaceLost
from writer.voucher_sink import VoucherDecision, VoucherFate, write_redemptions

TRANSACTION_TIMEOUT_S = 30.0
ACQUIRE_TIMEOUT_S = 10.0

_LOCK_ITEMS = """
SELECT id, quantity, sold, shards FROM flash_sale_item
WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE
"""
_STORED = """
SELECT id, status, failure_reason FROM flash_sale_order WHERE id = ANY($1::uuid[])
"""
_ACTIVE = """
SELECT o.item_id, o.user_id, o.id FROM flash_sale_order AS o
JOIN unnest($1::bigint[], $2::bigint[]) AS k(item_id, user_id)
  ON o.item_id = k.item_id AND o.user_id = k.user_id
WHERE o.status IN ('PENDING', 'PAID')
"""
_INSERT = """
INSERT INTO flash_sale_order
    (id, item_id, user_id, shard, status, created_at, expires_at, failure_reason)
SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::smallint[], $5::text[],
                     $6::timestamptz[], $7::timestamptz[], $8::text[])
ON CONFLICT DO NOTHING
RETURNING id
"""
_ADVANCE_SOLD = """
UPDATE flash_sale_item AS i SET sold = i.sold + d.n
FROM unnest($1::bigint[], $2::integer[]) AS d(id, n)
WHERE i.id = d.id AND i.sold + d.n <= i.quantity
RETURNING i.id
"""


class Fate(enum.Enum):
    INSERTED = "inserted"  # stored now, PENDING
    DUPLICATE = "duplicate"  # already stored (or earlier in this batch): nothing to do
    REFUSED = "refused"  # stored now, FAILED: dead-letter it and release its unit
    FAILED_BEFORE = "failed_before"  # stored FAILED by an earlier pass: release again
    UNKNOWN_ITEM = "unknown_item"  # no such item: nothing stored, dead-letter only


@dataclass(frozen=True, slots=True)
class Decision:
    order: Order
    fate: Fate
    reason: str = ""


@dataclass(frozen=True, slots=True)
class SinkResult:
    decisions: list[Decision]
    shards: dict[int, int]  # item id -> its number of stock shards
    vouchers: list[VoucherDecision] = field(default_factory=list)

    def with_fate(self, *fates: Fate) -> list[Decision]:
        return [d for d in self.decisions if d.fate in fates]

    def vouchers_with_fate(self, *fates: VoucherFate) -> list[VoucherDecision]:
        return [d for d in self.vouchers if d.fate in fates]


@dataclass(slots=True)
class _Item:
    quantity: int
    sold: int
    shards: int

    @property
    def left(self) -> int:
        return self.quantity - self.sold


class Sink:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def write(
        self, orders: Sequence[Order], redemptions: Sequence[Redemption] = ()
    ) -> SinkResult:
        """Store the batch in one transaction; raises (and stores nothing) on any failure."""
        if not orders and not redemptions:
            return SinkResult([], {})
        async with asyncio.timeout(TRANSACTION_TIMEOUT_S):
            async with self.pool.acquire(timeout=ACQUIRE_TIMEOUT_S) as conn:
                async with conn.transaction():
                    result = await _write(conn, orders) if orders else SinkResult([], {})
                    vouchers = await write_redemptions(conn, redemptions)
                    failpoint("writer.before_commit" if orders else "writer.vouchers.before_commit")
        return SinkResult(result.decisions, result.shards, vouchers)


async def _write(conn: Any, orders: Sequence[Order]) -> SinkResult:
    items = {
        row["id"]: _Item(row["quantity"], row["sold"], row["shards"])
        for row in await conn.fetch(_LOCK_ITEMS, sorted({o.event.item_id for o in orders}))
    }
    stored = {
        row["id"]: (row["status"], row["failure_reason"] or "")
        for row in await conn.fetch(_STORED, [o.id for o in orders])
    }
    active = {
        (row["item_id"], row["user_id"]): str(row["id"])
        for row in await conn.fetch(
            _ACTIVE, [o.event.item_id for o in orders], [o.event.user_id for o in orders]
        )
    }
    decisions = _decide(orders, items, stored, active)
    await _insert(conn, decisions)
    await _advance_sold(conn, decisions)
    return SinkResult(decisions, {item_id: item.shards for item_id, item in items.items()})


def _decide(
    orders: Sequence[Order],
    items: dict[int, _Item],
    stored: dict[uuid.UUID, tuple[str, str]],
    active: dict[tuple[int, int], str],
) -> list[Decision]:
    decisions: list[Decision] = []
    seen: set[uuid.UUID] = set()
    for order in orders:
        event = order.event
        item = items.get(event.item_id)
        if order.id in seen:
            decisions.append(Decision(order, Fate.DUPLICATE))
            continue
        seen.add(order.id)
        if order.id in stored:
            status, reason = stored[order.id]
            fate = Fate.FAILED_BEFORE if status == "FAILED" else Fate.DUPLICATE
            decisions.append(Decision(order, fate, reason))
        elif item is None:
            decisions.append(Decision(order, Fate.UNKNOWN_ITEM, f"unknown item {event.item_id}"))
        elif (holder := active.get((event.item_id, event.user_id))) is not None:
            reason = (
                f"already active: user {event.user_id} holds order {holder}"
                f" for item {event.item_id}"
            )
            decisions.append(Decision(order, Fate.REFUSED, reason))
        elif item.left <= 0:
            reason = f"sold out: item {event.item_id} has no unit left of {item.quantity}"
            decisions.append(Decision(order, Fate.REFUSED, reason))
        else:
            item.sold += 1
            active[(event.item_id, event.user_id)] = event.order_id
            decisions.append(Decision(order, Fate.INSERTED))
    return decisions


async def _insert(conn: Any, decisions: list[Decision]) -> None:
    rows = [d for d in decisions if d.fate in (Fate.INSERTED, Fate.REFUSED)]
    if not rows:
        return
    inserted = await conn.fetch(
        _INSERT,
        [d.order.id for d in rows],
        [d.order.event.item_id for d in rows],
        [d.order.event.user_id for d in rows],
        [d.order.event.shard for d in rows],
        ["PENDING" if d.fate is Fate.INSERTED else "FAILED" for d in rows],
        [d.order.created_at for d in rows],
        [d.order.expires_at for d in rows],
        [d.reason or None for d in rows],
    )
    if len(inserted) != len(rows):
        # Every conflict was ruled out under the item locks: a row that did not go in means a
        # writer that does not take them got there first. Roll back and decide again.
        raise RaceLost(f"{len(rows) - len(inserted)} of {len(rows)} rows met a conflict")


async def _advance_sold(conn: Any, decisions: list[Decision]) -> None:
    accepted = Counter(d.order.event.item_id for d in decisions if d.fate is Fate.INSERTED)
    if not accepted:
        return
    ids = sorted(accepted)
    advanced = await conn.fetch(_ADVANCE_SOLD, ids, [accepted[i] for i in ids])
    if len(advanced) != len(ids):
        raise RaceLost("the sold guard refused an advance that was checked under the row lock")
