"""Flash voucher uses into PostgreSQL, inside the batch's transaction, idempotent by orderId.

In this order (as writer/sink.py does for orders):

1. lock the batch's vouchers (``FOR UPDATE``, in code order, as the expiry job locks them, so
   the two never deadlock): the lock serialises every writer's limit checks for a voucher;
2. an orderId already stored is a duplicate (a redelivery): nothing changes, except that one
   stored FAILED earlier is reported again so its hold is released again (idempotent); an
   orderId stored for another voucher or customer is a conflict: no row, its hold is released;
3. walk the new uses in batch order: refuse one whose customer already holds the per-customer
   limit of active uses, or that finds no use left (``total_limit - used_count``); accept the
   rest;
4. insert accepted uses RESERVED and refused ones FAILED with their reason
   (``ON CONFLICT (order_id) DO NOTHING``; every row must come back, or someone raced us: retry);
5. advance ``used_count`` by the accepted count per voucher, guarded by
   ``used_count + n <= total_limit``.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from writer.batch import Redemption
from writer.errors import RaceLost

_LOCK_VOUCHERS = """
SELECT code, total_limit, used_count, per_customer_limit FROM voucher
WHERE code = ANY($1::text[]) ORDER BY code FOR UPDATE
"""
_STORED = """
SELECT order_id, voucher_code, customer_id, status, failure_reason FROM voucher_redemption
WHERE order_id = ANY($1::text[])
"""
_ACTIVE = """
SELECT r.voucher_code, r.customer_id, count(*) AS n FROM voucher_redemption AS r
JOIN (SELECT DISTINCT * FROM unnest($1::text[], $2::bigint[])) AS k(code, customer_id)
  ON r.voucher_code = k.code AND r.customer_id = k.customer_id
WHERE r.status IN ('RESERVED', 'CONFIRMED')
GROUP BY r.voucher_code, r.customer_id
"""
_INSERT = """
INSERT INTO voucher_redemption
    (voucher_code, order_id, customer_id, order_amount, discount_amount, status, reserved_at,
     expires_at, failure_reason)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[],
                     $6::text[], $7::timestamptz[], $8::timestamptz[], $9::text[])
ON CONFLICT (order_id) DO NOTHING
RETURNING order_id
"""
_ADVANCE_USED = """
UPDATE voucher AS v SET used_count = v.used_count + d.n
FROM unnest($1::text[], $2::integer[]) AS d(code, n)
WHERE v.code = d.code AND v.used_count + d.n <= v.total_limit
RETURNING v.code
"""


class VoucherFate(enum.Enum):
    INSERTED = "inserted"  # stored now, RESERVED
    DUPLICATE = "duplicate"  # already stored (or earlier in this batch): nothing to do
    REFUSED = "refused"  # stored now, FAILED: dead-letter it and release its hold
    FAILED_BEFORE = "failed_before"  # stored FAILED by an earlier pass: release again
    CONFLICT = "conflict"  # the orderId is another voucher's or customer's: release, no row
    UNKNOWN_VOUCHER = "unknown_voucher"  # no such voucher: nothing stored, dead-letter only


RELEASED_FATES = (VoucherFate.REFUSED, VoucherFate.FAILED_BEFORE, VoucherFate.CONFLICT)


@dataclass(frozen=True, slots=True)
class VoucherDecision:
    redemption: Redemption
    fate: VoucherFate
    reason: str = ""


@dataclass(slots=True)
class _Voucher:
    total_limit: int
    used_count: int
    per_customer_limit: int


async def write_redemptions(conn: Any, redemptions: Sequence[Redemption]) -> list[VoucherDecision]:
    """Steps 1-5 on ``conn``, inside the caller's transaction."""
    if not redemptions:
        return []
    vouchers = {
        row["code"]: _Voucher(row["total_limit"], row["used_count"], row["per_customer_limit"])
        for row in await conn.fetch(_LOCK_VOUCHERS, sorted({r.event.code for r in redemptions}))
    }
    stored = {
        row["order_id"]: row
        for row in await conn.fetch(_STORED, [r.event.order_id for r in redemptions])
    }
    active: Counter[tuple[str, int]] = Counter(
        {
            (row["voucher_code"], row["customer_id"]): row["n"]
            for row in await conn.fetch(
                _ACTIVE,
                [r.event.code for r in redemptions],
                [r.event.customer_id for r in redemptions],
            )
        }
    )
    decisions = _decide(redemptions, vouchers, stored, active)
    await _insert(conn, decisions)
    await _advance_used(conn, decisions)
    return decisions


def _decide(
    redemptions: Sequence[Redemption],
    vouchers: dict[str, _Voucher],
    stored: dict[str, Any],
    active: Counter[tuple[str, int]],
) -> list[VoucherDecision]:
    decisions: list[VoucherDecision] = []
    seen: set[str] = set()
    for redemption in redemptions:
        event = redemption.event
        voucher = vouchers.get(event.code)
        if event.order_id in seen:
            decisions.append(VoucherDecision(redemption, VoucherFate.DUPLICATE))
            continue
        seen.add(event.order_id)
        row = stored.get(event.order_id)
        if row is not None:
            if (row["voucher_code"], row["customer_id"]) != (event.code, event.customer_id):
                reason = (
                    f"order id conflict: {event.order_id} is a use of voucher"
                    f" {row['voucher_code']} by customer {row['customer_id']}"
                )
                decisions.append(VoucherDecision(redemption, VoucherFate.CONFLICT, reason))
            elif row["status"] == "FAILED":
                reason = row["failure_reason"] or ""
                decisions.append(VoucherDecision(redemption, VoucherFate.FAILED_BEFORE, reason))
            else:
                decisions.append(VoucherDecision(redemption, VoucherFate.DUPLICATE))
        elif voucher is None:
            reason = f"unknown voucher {event.code}"
            decisions.append(VoucherDecision(redemption, VoucherFate.UNKNOWN_VOUCHER, reason))
        elif active[(event.code, event.customer_id)] >= voucher.per_customer_limit:
            reason = (
                f"already used: customer {event.customer_id} holds"
                f" {voucher.per_customer_limit} uses of voucher {event.code}"
            )
            decisions.append(VoucherDecision(redemption, VoucherFate.REFUSED, reason))
        elif voucher.used_count >= voucher.total_limit:
            reason = f"out of stock: voucher {event.code} has no use left of {voucher.total_limit}"
            decisions.append(VoucherDecision(redemption, VoucherFate.REFUSED, reason))
        else:
            voucher.used_count += 1
            active[(event.code, event.customer_id)] += 1
            decisions.append(VoucherDecision(redemption, VoucherFate.INSERTED))
    return decisions


async def _insert(conn: Any, decisions: list[VoucherDecision]) -> None:
    rows = [d for d in decisions if d.fate in (VoucherFate.INSERTED, VoucherFate.REFUSED)]
    if not rows:
        return
    events = [d.redemption.event for d in rows]
    inserted = await conn.fetch(
        _INSERT,
        [e.code for e in events],
        [e.order_id for e in events],
        [e.customer_id for e in events],
        [e.order_amount for e in events],
        [e.discount_amount for e in events],
        ["RESERVED" if d.fate is VoucherFate.INSERTED else "FAILED" for d in rows],
        [d.redemption.reserved_at for d in rows],
        [d.redemption.expires_at for d in rows],
        [d.reason or None for d in rows],
    )
    if len(inserted) != len(rows):
        # An ordinary reservation took one of these orderIds meanwhile: decide again.
        raise RaceLost(f"{len(rows) - len(inserted)} of {len(rows)} voucher uses met a conflict")


async def _advance_used(conn: Any, decisions: list[VoucherDecision]) -> None:
    accepted = Counter(d.redemption.event.code for d in decisions if d.fate is VoucherFate.INSERTED)
    if not accepted:
        return
    codes = sorted(accepted)
    advanced = await conn.fetch(_ADVANCE_USED, codes, [accepted[c] for c in codes])
    if len(advanced) != len(codes):
        raise RaceLost("the used_count guard refused an advance checked under the row lock")
