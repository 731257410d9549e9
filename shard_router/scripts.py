"""The Lua scripts of lua/, read once and named by their SHA1 for EVALSHA.

Every one of them changes state, so the auto-pipeline confirms a batch holding any of them on
the replica (WAIT); a read-only script added here would need telling apart.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from kernel.resources import asset

LUA_DIR = asset("lua")


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: bytes
    sha: str


def _load(name: str) -> Script:
    source = (LUA_DIR / f"{name}.lua").read_bytes()
    return Script(name, source, hashlib.sha1(source, usedforsecurity=False).hexdigest())


RESERVE = _load("reserve")
BORROW = _load("borrow")
CLAIM = _load("claim")
RELEASE = _load("release")
UNCLAIM = _load("unclaim")
LOAD = _load("load")  # an item shard and a flash voucher alike
VOUCHER_RESERVE = _load("voucher_reserve")
VOUCHER_RELEASE = _load("voucher_release")
REASSERT = _load("reassert")  # the writer: a stored order's hold and dedup entry, once
FORFEIT = _load("forfeit")  # the writer: a refused order's hold, without its unit
VOUCHER_REASSERT = _load("voucher_reassert")
VOUCHER_FORFEIT = _load("voucher_forfeit")
VOUCHER_ORDER_CLAIM = _load("voucher_order_claim")  # the owner of an orderId, on any voucher
VOUCHER_ORDER_SETTLE = _load("voucher_order_settle")

ALL = (
    RESERVE,
    BORROW,
    CLAIM,
    RELEASE,
    UNCLAIM,
    LOAD,
    VOUCHER_RESERVE,
    VOUCHER_RELEASE,
    REASSERT,
    FORFEIT,
    VOUCHER_REASSERT,
    VOUCHER_FORFEIT,
    VOUCHER_ORDER_CLAIM,
    VOUCHER_ORDER_SETTLE,
)
