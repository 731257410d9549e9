"""Order ids are UUIDv8 that carry their item id in the first 48 bits, so an order still only in
Kafka can be found in Redis (its item's shards) from the id alone. The rest is random."""

from __future__ import annotations

import os
import uuid

_ITEM_BITS = 48


def new_order_id(item_id: int) -> str:
    rand = int.from_bytes(os.urandom(10), "big")  # 80 random bits, 74 of them used
    value = (
        (item_id & ((1 << _ITEM_BITS) - 1)) << 80
        | 0x8 << 76  # version 8
        | ((rand >> 62) & 0xFFF) << 64
        | 0b10 << 62  # RFC 9562 variant
        | rand & ((1 << 62) - 1)
    )
    return str(uuid.UUID(int=value))


def item_of(order_id: str) -> int | None:
    """The item an order id was minted for, or None when it is not one of ours."""
    try:
        parsed = uuid.UUID(order_id)
    except ValueError:
        return None
    if parsed.version != 8:
        return None
    return parsed.int >> 80
