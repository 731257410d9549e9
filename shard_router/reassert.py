"""Putting back in Redis what the database says is held, and dropping what it refused for lack of
stock without giving that unit back: lua/reassert.lua, forfeit.lua, voucher_reassert.lua and
voucher_forfeit.lua, for the writer (after each commit) and reconciliation (a lost hold).

Redis replicates asynchronously: a promoted replica may lack a reservation its primary had
acknowledged. Its order is then in the database while Redis has the unit back in stock and has
forgotten the hold (and the buyer's dedup entry). Re-asserting every stored order restores them;
each call is idempotent, so a replayed batch takes no second unit.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable
from dataclasses import dataclass

from kernel.sharding import home_shard
from shard_router import scripts
from shard_router.keys import shard_keys
from shard_router.router import ShardRouter
from shard_router.vouchers import voucher_keys


class Restored(enum.Enum):
    """What one re-assert found, for a hold (or a buyer's dedup entry)."""

    ABSENT = "absent"  # not asked: this shard neither lent the unit nor is the buyer's home
    PRESENT = "present"  # Redis had it; nothing written
    RESTORED = "restored"  # it was missing: written, with a unit (use) taken from the stock
    UNBACKED = "unbacked"  # it was missing and the stock was 0: written without a unit
    OTHER = "other"  # a dedup entry (a voucher hold) names another order (customer): kept
    NOT_LOADED = "not_loaded"  # the place is not loaded: nothing written (a load rebuilds it)


_HOLD = {
    0: Restored.ABSENT,
    1: Restored.PRESENT,
    2: Restored.RESTORED,
    3: Restored.UNBACKED,
    5: Restored.NOT_LOADED,
}
_BUYER = {
    0: Restored.ABSENT,
    1: Restored.PRESENT,
    2: Restored.RESTORED,
    3: Restored.OTHER,
    5: Restored.NOT_LOADED,
}
_USE = {
    1: Restored.PRESENT,
    2: Restored.RESTORED,
    3: Restored.UNBACKED,
    4: Restored.OTHER,
    5: Restored.NOT_LOADED,
}


@dataclass(frozen=True, slots=True)
class Reasserted:
    hold: Restored  # the unit's hold record on the shard it came from (a voucher's use)
    buyer: Restored = Restored.ABSENT  # the buyer's dedup entry on their home shard

    @property
    def wrote(self) -> bool:
        return Restored.RESTORED in (self.hold, self.buyer) or self.hold is Restored.UNBACKED


async def reassert_order(
    router: ShardRouter, item_id: int, shards: int, unit_shard: int, user_id: int, order_id: str
) -> Reasserted:
    """The hold on ``unit_shard`` and the dedup entry on the buyer's home shard: one call when
    they are the same shard, two (sent in the same tick) when the unit was borrowed."""
    home = home_shard(user_id, shards)
    if home == unit_shard:
        hold, buyer = await _reassert_on(router, item_id, unit_shard, user_id, order_id, "1", "1")
        return Reasserted(_HOLD[hold], _BUYER[buyer])
    (hold, _), (_, buyer) = await asyncio.gather(
        _reassert_on(router, item_id, unit_shard, user_id, order_id, "1", "0"),
        _reassert_on(router, item_id, home, user_id, order_id, "0", "1"),
    )
    return Reasserted(_HOLD[hold], _BUYER[buyer])


def _reassert_on(
    router: ShardRouter,
    item_id: int,
    shard: int,
    user_id: int,
    order_id: str,
    unit: str,
    home: str,
) -> Awaitable[list[int]]:
    keys = shard_keys(item_id, shard)
    return router.pipeline.call(
        scripts.REASSERT, [keys.stock, keys.orders, keys.buyers], [user_id, order_id, unit, home]
    )


async def forfeit_order(
    router: ShardRouter, item_id: int, shards: int, unit_shard: int, user_id: int, order_id: str
) -> bool:
    """Drop the hold of an order the database refused for capacity, without its unit, and the
    buyer's dedup entry (unless it names another order). Whether a hold was removed now."""
    keys = shard_keys(item_id, unit_shard)
    home = shard_keys(item_id, home_shard(user_id, shards))
    dropped, _ = await asyncio.gather(
        router.pipeline.call(scripts.FORFEIT, [keys.orders, keys.outbox], [order_id]),
        router.pipeline.call(scripts.UNCLAIM, [home.buyers], [user_id, order_id]),
    )
    return bool(dropped)


async def reassert_use(
    router: ShardRouter, code: str, customer_id: int, order_id: str
) -> Reasserted:
    """A stored flash voucher use's hold, with the customer's count."""
    keys = voucher_keys(code)
    found = await router.pipeline.call(
        scripts.VOUCHER_REASSERT,
        [keys.remaining, keys.customers, keys.holds],
        [customer_id, order_id],
    )
    return Reasserted(_USE[int(found)])


async def forfeit_use(router: ShardRouter, code: str, order_id: str) -> bool:
    """Drop the hold of a use the database refused for the voucher's limit, without the use;
    the orderId is remembered as ended. Whether a hold was removed now."""
    keys = voucher_keys(code)
    dropped = await router.pipeline.call(
        scripts.VOUCHER_FORFEIT, [keys.customers, keys.holds, keys.outbox, keys.ended], [order_id]
    )
    return bool(dropped)
