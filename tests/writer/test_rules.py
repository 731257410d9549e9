"""Pure: the rules a batch is decided by, for each stream, from what its transaction read."""

from __future__ import annotations

import uuid
from typing import Any

from kernel.events import VoucherReserved
from tests.support.writer import order
from writer import ORDERS, VOUCHERS, Fate, Record
from writer.orders import to_order
from writer.rules import decide
from writer.vouchers import to_redemption

_RECORD = Record("topic", 0, 0, None, None)


def _target(target: int | str, capacity: int, taken: int, per_buyer: int) -> dict[str, Any]:
    return {"target": target, "capacity": capacity, "taken": taken, "per_buyer": per_buyer}


def test_orders_one_per_buyer_and_item_until_sold_out() -> None:
    first, again, other, late, lost = (order(1, user) for user in (7, 7, 8, 9, 10))
    stored_failed = order(1, 11)
    batch = [to_order(_RECORD, e) for e in (first, first, again, other, late, lost)]
    batch += [to_order(_RECORD, stored_failed), to_order(_RECORD, order(2, 12))]
    held_by_9 = str(uuid.uuid4())
    failed = {"status": "FAILED", "failure_reason": "sold out: item 1 has no unit left of 4"}
    decisions = decide(
        ORDERS,
        batch,
        {1: _target(1, capacity=4, taken=1, per_buyer=1)},
        {uuid.UUID(stored_failed.order_id): failed},
        [{"target": 1, "buyer": 9, "holder": held_by_9}],
    )
    assert [d.fate for d in decisions] == [
        Fate.INSERTED,
        Fate.DUPLICATE,
        Fate.REFUSED,
        Fate.INSERTED,
        Fate.REFUSED,
        Fate.INSERTED,
        Fate.FAILED_BEFORE,
        Fate.UNKNOWN_ITEM,
    ]
    assert decisions[2].reason == f"already active: user 7 holds order {first.order_id} for item 1"
    assert held_by_9 in decisions[4].reason
    assert decisions[6].reason == failed["failure_reason"]
    assert decisions[7].reason == "unknown item 2"
    # Only what is stored and active now is re-asserted; a refusal for the buyer's limit gives
    # its unit back, and a stored capacity refusal forfeits its hold again.
    assert [d.active for d in decisions] == [True, False, False, True, False, True, False, False]
    assert [d.forfeit for d in decisions] == [False] * 6 + [True, False]

    # The last unit taken: the next buyer finds none, and forfeits the unit Redis gave them.
    sold_out = decide(ORDERS, batch[5:6], {1: _target(1, 4, 4, 1)}, {}, [])
    assert (sold_out[0].fate, sold_out[0].reason, sold_out[0].forfeit) == (
        Fate.REFUSED,
        "sold out: item 1 has no unit left of 4",
        True,
    )


def test_a_stored_order_is_re_asserted_only_while_active() -> None:
    pending, paid, expired = (order(1, user) for user in (1, 2, 3))
    stored = {
        uuid.UUID(e.order_id): {"status": status, "failure_reason": None}
        for e, status in ((pending, "PENDING"), (paid, "PAID"), (expired, "EXPIRED"))
    }
    rows = [to_order(_RECORD, e) for e in (pending, paid, expired)]
    decisions = decide(ORDERS, rows, {1: _target(1, 4, 2, 1)}, stored, [])
    assert [(d.fate, d.active) for d in decisions] == [
        (Fate.DUPLICATE, True),
        (Fate.DUPLICATE, True),
        (Fate.DUPLICATE, False),
    ]


def test_voucher_uses_per_customer_limit_capacity_and_order_id_conflicts() -> None:
    def use(order_id: str, customer: int, code: str = "CODE") -> VoucherReserved:
        return VoucherReserved(order_id, code, customer, 1000, 100, 0, 0)

    events = [use("o1", 1), use("o2", 1), use("o3", 1), use("o4", 2), use("o5", 3)]
    events += [use("taken", 4), use("o6", 5, code="NONE"), use("elsewhere", 6)]
    # Known by (code, orderId): "elsewhere" is a use of another voucher, no conflict here.
    stored = {
        ("CODE", "taken"): {"voucher_code": "CODE", "customer_id": 9, "status": "RESERVED"},
        ("OTHER", "elsewhere"): {"voucher_code": "OTHER", "customer_id": 6, "status": "RESERVED"},
    }
    decisions = decide(
        VOUCHERS,
        [to_redemption(_RECORD, e) for e in events],
        {"CODE": _target("CODE", capacity=4, taken=0, per_buyer=2)},
        stored,
        [],
    )
    assert [d.fate for d in decisions] == [
        Fate.INSERTED,
        Fate.INSERTED,
        Fate.REFUSED,
        Fate.INSERTED,
        Fate.INSERTED,
        Fate.CONFLICT,
        Fate.UNKNOWN_VOUCHER,
        Fate.REFUSED,  # the voucher's fifth use of four
    ]
    assert decisions[2].reason == "already used: customer 1 holds 2 uses of voucher CODE"
    assert decisions[5].reason.startswith("order id conflict: taken is a use of voucher CODE")
    assert [d.forfeit for d in decisions] == [False] * 7 + [True]

    # Every use taken: the next customer finds none.
    full = decide(VOUCHERS, [decisions[4].row], {"CODE": _target("CODE", 4, 4, 2)}, {}, [])
    assert (full[0].fate, full[0].reason) == (
        Fate.REFUSED,
        "out of stock: voucher CODE has no use left of 4",
    )


def test_one_order_id_on_two_vouchers_is_two_uses() -> None:
    def use(code: str, customer: int) -> VoucherReserved:
        return VoucherReserved("order-1", code, customer, 1000, 100, 0, 0)

    rows = [to_redemption(_RECORD, e) for e in (use("DISCOUNT", 1), use("SHIPPING", 1))]
    rows.append(to_redemption(_RECORD, use("DISCOUNT", 1)))  # a redelivery
    locked = {code: _target(code, 10, 0, 1) for code in ("DISCOUNT", "SHIPPING")}
    decisions = decide(VOUCHERS, rows, locked, {}, [])
    assert [d.fate for d in decisions] == [Fate.INSERTED, Fate.INSERTED, Fate.DUPLICATE]
