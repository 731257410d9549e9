"""The vouchers stream: VoucherReserved events (flash voucher uses Redis granted) from the
vouchers topic become voucher_redemption rows.

A use is known by (code, orderId): one order may carry several vouchers, each reserved under
the order's id. Vouchers are locked in code order, as the expiry job locks them, so the two never
deadlock; a customer holds at most ``per_customer_limit`` active (RESERVED or CONFIRMED) uses of
a voucher. Only a (code, orderId) conflict skips a row, and one stored for another customer is a
conflict: no row, the hold goes back. A use refused for the customer's limit gives its use back
in Redis; one refused for the voucher's total limit forfeits its hold without the use (Redis
granted one it did not have). Every stored use is re-asserted (writer/settle.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Set
from typing import Any

from domain.vouchers import valid_code, valid_order_id
from kernel.events import VoucherReserved
from shard_router import ShardRouter, VoucherStore
from shard_router.reassert import Reasserted, forfeit_use, reassert_use
from writer.batch import BIGINT, InvalidEvent, Record, Row, in_range, timestamp
from writer.stream import Decision, Holder, Locked, Stream

Redemption = Row[VoucherReserved]

# Its rows' columns (writer/sql.py's Schema.columns), in the order to_redemption() fills them.
COLUMNS = (
    "order_id text, voucher_code text, customer_id bigint, order_amount bigint,"
    " discount_amount bigint, reserved_at timestamptz, expires_at timestamptz"
)


def to_redemption(record: Record, event: VoucherReserved) -> Redemption:
    if not valid_order_id(event.order_id):
        raise InvalidEvent(f"order_id {event.order_id!r} is not a valid order id")
    if not valid_code(event.code):
        raise InvalidEvent(f"code {event.code!r} is not a valid voucher code")
    in_range("customer_id", event.customer_id, 1, BIGINT[1])
    in_range("order_amount", event.order_amount, 0, BIGINT[1])
    in_range("discount_amount", event.discount_amount, 1, BIGINT[1])
    reserved_at = timestamp("reserved_at_ms", event.reserved_at_ms)
    expires_at = timestamp("expires_at_ms", event.expires_at_ms)
    rest = (event.order_amount, event.discount_amount, reserved_at, expires_at)
    return Row(record, event, event.order_id, event.code, event.customer_id, rest)


class VoucherStream(Stream[VoucherReserved, str]):
    """The vouchers stream's hooks; its particulars are writer/streams.py's (VOUCHERS)."""

    def to_row(self, record: Record, event: VoucherReserved) -> Redemption:
        return to_redemption(record, event)

    def holder(self, row: Redemption) -> Holder:
        e = row.event
        return Holder(e.order_id, e.code, e.customer_id, None)

    def held_reason(self, row: Redemption, holders: Set[str], per_buyer: int) -> str:
        return f"already used: customer {row.buyer} holds {per_buyer} uses of voucher {row.target}"

    def conflict(self, row: Redemption, stored: Mapping[str, Any]) -> str | None:
        code, customer = stored["voucher_code"], stored["customer_id"]
        if customer == row.buyer:
            return None
        return (
            f"order id conflict: {row.order_id} is a use of voucher {code} by customer {customer}"
        )

    def release(self, router: ShardRouter, holder: Holder, locked: Locked) -> Awaitable[bool]:
        return VoucherStore(router).release(holder.target, holder.order_id)

    def forfeit(self, router: ShardRouter, holder: Holder, locked: Locked) -> Awaitable[bool]:
        return forfeit_use(router, holder.target, holder.order_id)

    def reassert(
        self, router: ShardRouter, holder: Holder, locked: Locked
    ) -> Awaitable[Reasserted | None]:
        return reassert_use(router, holder.target, holder.buyer, holder.order_id)

    def outbox(self, decision: Decision[VoucherReserved]) -> str:
        return decision.row.event.code

    def drop(self, router: ShardRouter, outbox: str, order_ids: list[str]) -> Awaitable[object]:
        return VoucherStore(router).ack_outbox(outbox, order_ids)
