"""The orders stream: OrderPlaced events from the orders topic become flash_sale_order rows.

Items are locked by id; a buyer holds at most one active (PENDING or PAID) order per item, as the
unique index flash_sale_order_one_active enforces too; any conflict skips a row (and is then a
race: writer/sink.py decides again). A refused order frees the buyer's dedup entry on their home
shard and gives its unit back to the shard it came from, except when it was refused because the
item was sold out: then its hold goes without the unit (Redis sold one it did not have). Every
stored order is re-asserted on its unit's shard and its buyer's home shard (writer/settle.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Set

from kernel.events import OrderPlaced
from shard_router import ShardRouter
from shard_router.reassert import Reasserted, forfeit_order, reassert_order
from writer.batch import BIGINT, SMALLINT, InvalidEvent, Record, Row, in_range, timestamp
from writer.stream import Decision, Fate, Holder, Locked, Stream

Order = Row[OrderPlaced]

# Its rows' columns (writer/sql.py's Schema.columns), in the order to_order() fills them.
COLUMNS = (
    "id uuid, item_id bigint, user_id bigint, shard smallint, created_at timestamptz,"
    " expires_at timestamptz"
)


def to_order(record: Record, event: OrderPlaced) -> Order:
    try:
        order_id = uuid.UUID(event.order_id)
    except ValueError:
        raise InvalidEvent(f"order_id {event.order_id!r} is not a UUID") from None
    in_range("item_id", event.item_id, 1, BIGINT[1])
    in_range("user_id", event.user_id, *BIGINT)
    in_range("shard", event.shard, *SMALLINT)
    in_range("home_shard", event.home_shard, *SMALLINT)
    created_at = timestamp("created_at_ms", event.created_at_ms)
    expires_at = timestamp("expires_at_ms", event.expires_at_ms)
    rest = (event.shard, created_at, expires_at)
    return Row(record, event, order_id, event.item_id, event.user_id, rest)


class OrderStream(Stream[OrderPlaced, tuple[int, int]]):
    """The orders stream's hooks; its particulars are writer/streams.py's (ORDERS)."""

    def to_row(self, record: Record, event: OrderPlaced) -> Order:
        return to_order(record, event)

    def holder(self, row: Order) -> Holder:
        e = row.event
        return Holder(e.order_id, e.item_id, e.user_id, e.shard)

    def held_reason(self, row: Order, holders: Set[str], per_buyer: int) -> str:
        held = ", ".join(sorted(holders))
        return f"already active: user {row.buyer} holds order {held} for item {row.target}"

    async def release(self, router: ShardRouter, holder: Holder, locked: Locked) -> bool:
        if (shards := _shards(holder, locked)) is None:
            return False
        h = holder
        return await router.release(h.target, shards, _place(h), h.buyer, h.order_id)

    async def forfeit(self, router: ShardRouter, holder: Holder, locked: Locked) -> bool:
        if (shards := _shards(holder, locked)) is None:
            return False
        h = holder
        return await forfeit_order(router, h.target, shards, _place(h), h.buyer, h.order_id)

    async def reassert(
        self, router: ShardRouter, holder: Holder, locked: Locked
    ) -> Reasserted | None:
        if (shards := _shards(holder, locked)) is None:
            return None
        h = holder
        return await reassert_order(router, h.target, shards, _place(h), h.buyer, h.order_id)

    def outbox(self, decision: Decision[OrderPlaced]) -> tuple[int, int] | None:
        # An order of no known item has no outbox to be dropped from.
        if decision.fate is Fate.UNKNOWN_ITEM:
            return None
        return decision.row.event.item_id, decision.row.event.shard

    def drop(
        self, router: ShardRouter, outbox: tuple[int, int], order_ids: list[str]
    ) -> Awaitable[object]:
        item_id, shard = outbox
        return router.ack_outbox(item_id, shard, order_ids)


def _shards(holder: Holder, locked: Locked) -> int | None:
    """The item's shard count, from its row the batch locked; None for an unknown item."""
    item = locked.get(holder.target)
    return None if item is None else int(item["shards"])


def _place(holder: Holder) -> int:
    assert holder.place is not None, "an order's hold names the shard its unit came from"
    return holder.place
