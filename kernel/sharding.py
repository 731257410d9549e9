"""Which stock shard a buyer belongs to: shared by the domain (warm-up rebuilds each buyer's dedup
entry there) and the Redis side (it routes the buyer there first)."""

from __future__ import annotations


def home_shard(user_id: int, shards: int) -> int:
    """The buyer's home shard: where their dedup entry lives and their first unit is looked for."""
    return user_id % shards
