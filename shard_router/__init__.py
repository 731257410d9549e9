"""Routes a buyer to their home stock shard ``{item:<id>:<userId % N>}`` on the Redis Cluster and
runs the lua/ scripts there, auto-pipelined per node, each call under a deadline; flash voucher
uses live under ``{voucher:<code>}`` (VoucherStore)."""

from .errors import ShardUnavailable
from .keys import ShardKeys, home_shard, shard_keys
from .router import Outcome, Reservation, ShardRouter, ShardState, make_client
from .vouchers import VoucherKeys, VoucherReservation, VoucherState, VoucherStore, voucher_keys

__all__ = [
    "Outcome",
    "Reservation",
    "ShardKeys",
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
