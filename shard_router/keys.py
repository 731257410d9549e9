"""Key names of one stock shard: every key of shard k of an item shares the hash tag
``{item:<id>:<k>}``, so one Lua call can touch them all on one cluster node."""

from __future__ import annotations

import functools
from typing import NamedTuple


class ShardKeys(NamedTuple):
    stock: str
    buyers: str
    orders: str
    outbox: str


@functools.lru_cache(maxsize=65_536)  # the hot path asks for the same few shards all the time
def shard_keys(item_id: int, shard: int) -> ShardKeys:
    tag = f"{{item:{item_id}:{shard}}}"
    return ShardKeys(f"{tag}:stock", f"{tag}:buyers", f"{tag}:orders", f"{tag}:outbox")


def borrow_order(home: int, shards: int) -> list[int]:
    """The other shards, in the order a buyer with this home shard asks them for a unit."""
    return [(home + step) % shards for step in range(1, shards)]
