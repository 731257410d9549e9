"""Order ids are UUIDv8 that carry their item id in the first 48 bits, so an order still only in
Kafka can be found in Redis (its item's shards) from the id alone. The rest is random."""

from __future__ import annotations

import os
import re
import uuid

_ITEM_BITS = 48
# Only the canonical 8-4-4-4-12 form, in ASCII hex of either case: uuid.UUID alone also takes
# braces, a "urn:uuid:" prefix, missing hyphens and Unicode digits, so one order would have
# many spellings.
_CANONICAL = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
_RANDOM_BATCH = 10 * 512


class _Urandom:
    """os.urandom read 512 ids at a time: one system call per batch, not one per order."""

    def __init__(self) -> None:
        self._bytes = b""
        self._at = 0

    def take10(self) -> bytes:
        if self._at + 10 > len(self._bytes):
            self._bytes, self._at = os.urandom(_RANDOM_BATCH), 0
        self._at += 10
        return self._bytes[self._at - 10 : self._at]

    def forget(self) -> None:
        self._bytes, self._at = b"", 0


_urandom = _Urandom()
# A forked worker must not reuse its parent's unread bytes: two processes would mint equal ids.
os.register_at_fork(after_in_child=_urandom.forget)


def new_order_id(item_id: int) -> str:
    rand = int.from_bytes(_urandom.take10(), "big")  # 80 random bits, 74 of them used
    value = (
        (item_id & ((1 << _ITEM_BITS) - 1)) << 80
        | 0x8 << 76  # version 8
        | ((rand >> 62) & 0xFFF) << 64
        | 0b10 << 62  # RFC 9562 variant
        | rand & ((1 << 62) - 1)
    )
    # str(uuid.UUID(int=value)), without building the object.
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def parse_order_id(text: str) -> uuid.UUID | None:
    """An order id as a client may write it (the canonical form), or None."""
    if _CANONICAL.fullmatch(text) is None:
        return None
    return uuid.UUID(text)


def item_of(order_id: str) -> int | None:
    """The item an order id was minted for, or None when it is not one of ours."""
    parsed = parse_order_id(order_id)
    if parsed is None or parsed.version != 8:
        return None
    return parsed.int >> 80
