"""Routes a buyer to their home stock shard ``{item:<id>:<userId % N>}`` on the Redis Cluster and
runs the lua/ scripts there, auto-pipelined per node, each call under a deadline; flash voucher
uses live under ``{voucher:<code>}`` (VoucherStore)."""

from kernel.errors import ShardUnavailable
from kernel.sharding import home_shard
from shard_router.keys import ShardKeys, shard_keys
from shard_router.router import (
    Outcome,
    Reservation,
    ShardNotLoaded,
    ShardRouter,
    ShardState,
    make_client,
)
from shard_router.vouchers import (
    VoucherKeys,
    VoucherReservation,
    VoucherState,
    VoucherStore,
    voucher_keys,
)

__all__ = [
    "Outcome",
    "Reservation",
    "ShardKeys",
    "ShardNotLoaded",
    "ShardRouter",
    "ShardState",
    "ShardUnavailable",
    "VoucherKeys",
    "VoucherReservation",
    "VoucherState",
    "VoucherStore",
    "home_shard",
    "make_client",
    "shard_keys",
    "voucher_keys",
]
