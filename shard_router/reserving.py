"""Taking a buyer's unit: from their home shard, else borrowed from the item's other shards.

The home shard holds the buyer's dedup entry. Before a unit is borrowed elsewhere, reserve.lua
writes that entry as a *pending borrow* ("~<sinceMs>~<orderId>"), claim.lua turns it into the
plain orderId once the unit is taken, and unclaim.lua removes it when no shard lent one. So a
retry after a 503 anywhere on that path (a new orderId: the gateway makes one per request) meets
the pending borrow and never borrows a second unit: it finds the unit the first attempt took
(the buyer gets that orderId, 409), or waits for a borrow still under way, or, once the pending
borrow's lease is over and no shard holds a unit for it, replaces it. borrow.lua refuses to lend
past half the lease, so a late borrow never lands after that: a write sent to a node that then
stopped does run when it resumes, even after its connection was dropped at the deadline (seen on
the test cluster). The two halves of the lease are read on two nodes' clocks: the margin covers
their skew.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernel.errors import ShardUnavailable
from kernel.sharding import home_shard
from shard_router import scripts
from shard_router.autopipeline import AutoPipeline
from shard_router.keys import borrow_order, shard_keys

_PENDING_POLL_S = 0.02  # a double click waits for its twin's borrow, this often ...
_PENDING_ROUNDS = 10  # ... this many times, then answers 503


class Outcome(enum.Enum):
    RESERVED = "RESERVED"  # a unit was taken now
    REPLAY = "REPLAY"  # this orderId already held the buyer's unit
    ALREADY = "ALREADY"  # the buyer holds another active order
    SOLD_OUT = "SOLD_OUT"  # every shard of the item is empty (each one loaded and at 0)


class UnitMayBeHeld(ShardUnavailable):
    """Redis did not confirm a call that takes a unit (a missed deadline, a replica that did not
    confirm within the WAIT): it may have run, and then the unit is held under ``order_id`` and
    its outbox entry goes to Kafka. The buyer's 503 names that orderId."""

    def __init__(self, cause: ShardUnavailable, order_id: str) -> None:
        super().__init__(cause.node, cause.reason)
        self.order_id = order_id


class ShardNotLoaded(ShardUnavailable):
    """A shard's stock key is missing (never loaded, or the node lost it: restarted empty, or a
    replica promoted before it had the load). Its stock is unknown, never 0: a 503, and never a
    reason to flag the item sold out."""


@dataclass(frozen=True, slots=True)
class Reservation:
    outcome: Outcome
    order_id: str  # the new order, or the buyer's existing one for ALREADY
    unit_shard: int = -1
    units_left_on_shard: int = -1


@dataclass(frozen=True, slots=True)
class _Attempt:
    item_id: int
    shards: int
    home: int
    user_id: int
    order_id: str
    payload_for: Callable[[int], bytes]
    args: list[Any]  # reserve.lua's ARGV

    @property
    def buyers(self) -> str:
        return shard_keys(self.item_id, self.home).buyers


class Reserver:
    def __init__(self, pipeline: AutoPipeline, borrow_lease_ms: int) -> None:
        self._pipeline = pipeline
        self._lease_ms = borrow_lease_ms

    async def reserve(
        self,
        item_id: int,
        shards: int,
        user_id: int,
        order_id: str,
        payload_for: Callable[[int], bytes],
    ) -> Reservation:
        home = home_shard(user_id, shards)
        keys = shard_keys(item_id, home)
        args: list[Any] = [user_id, order_id, payload_for(home)]
        if shards > 1:
            args.append(self._lease_ms)  # an empty home shard writes the pending borrow
        try:
            reply = await self._pipeline.call(scripts.RESERVE, list(keys), args)
        except ShardUnavailable as exc:
            raise UnitMayBeHeld(exc, order_id) from None
        if reply[0] == 0:
            return Reservation(Outcome.RESERVED, order_id, home, int(reply[1]))
        attempt = _Attempt(item_id, shards, home, user_id, order_id, payload_for, args)
        return await self._not_taken_at_home(attempt, reply)

    async def _not_taken_at_home(self, a: _Attempt, reply: list[Any]) -> Reservation:
        keys = list(shard_keys(a.item_id, a.home))
        for _ in range(_PENDING_ROUNDS):
            code = reply[0]
            if code == 0:
                return Reservation(Outcome.RESERVED, a.order_id, a.home, int(reply[1]))
            if code == 1:
                return Reservation(Outcome.REPLAY, a.order_id, a.home)
            if code == 2:
                return Reservation(Outcome.ALREADY, reply[1].decode())
            if code == 5:
                raise ShardNotLoaded(self._pipeline.node_of(keys[0]), f"{keys[0]} is missing")
            if code == 3:
                if a.shards == 1:
                    return Reservation(Outcome.SOLD_OUT, a.order_id)
                return await self._borrow(a, int(reply[2]))
            # 4: a pending borrow of this buyer (a retry after a 503, or a double click).
            pending, age_ms = reply[1].decode(), int(reply[2])
            found = await self._settle(a, pending)
            if found is not None:
                return found
            if age_ms >= self._lease_ms:
                # Lease over, no unit anywhere, and borrow.lua lends it none from now on.
                replace = [*a.args[:3], self._lease_ms, pending]
                reply = await self._taking(a.order_id, scripts.RESERVE, keys, replace)
            else:
                await asyncio.sleep(_PENDING_POLL_S)  # its borrow may still be under way
                reply = await self._taking(a.order_id, scripts.RESERVE, keys, a.args)
        raise ShardUnavailable(
            self._pipeline.node_of(keys[0]), "a borrow of this buyer is unfinished"
        )

    async def _settle(self, a: _Attempt, pending: str) -> Reservation | None:
        """Does another shard hold a unit for the pending borrow? Then it is the buyer's order:
        claim it for them (as its own request would have) and answer with it."""
        donors = borrow_order(a.home, a.shards)
        orders = [shard_keys(a.item_id, d).orders for d in donors]
        held = await asyncio.gather(
            *self._pipeline.commands([(k, ["HEXISTS", k, pending]) for k in orders])
        )
        if not any(held):
            return None
        reply = await self._taking(pending, scripts.CLAIM, [a.buyers], [a.user_id, pending])
        if reply[0] in (0, 1):
            return Reservation(Outcome.ALREADY, pending)
        if reply[0] == 2:
            return Reservation(Outcome.ALREADY, reply[1].decode())
        raise ShardUnavailable(self._pipeline.node_of(a.buyers), "the buyer's borrow was replaced")

    async def _borrow(self, a: _Attempt, since_ms: int) -> Reservation:
        """Ask the other shards in turn; the pending borrow (dated ``since_ms``) is in place."""
        not_after_ms = since_ms + self._lease_ms // 2
        unloaded: str | None = None
        for donor in borrow_order(a.home, a.shards):
            keys = shard_keys(a.item_id, donor)
            reply = await self._taking(
                a.order_id,
                scripts.BORROW,
                [keys.stock, keys.orders, keys.outbox],
                [a.user_id, a.order_id, a.payload_for(donor), not_after_ms],
            )
            code = reply[0]
            if code in (0, 1):
                left = int(reply[1]) if code == 0 else -1
                return await self._claim(a, donor, code == 0, left)
            if code == 5:
                unloaded = keys.stock  # another shard may still lend; never "sold out" though
            elif code == 6:
                # Too slow to borrow within the lease: nothing taken here nor before.
                await self._forget(a)
                raise ShardUnavailable(self._pipeline.node_of(keys.stock), "borrow past its lease")
        await self._forget(a)
        if unloaded is not None:
            raise ShardNotLoaded(self._pipeline.node_of(unloaded), f"{unloaded} is missing")
        return Reservation(Outcome.SOLD_OUT, a.order_id)

    async def _claim(self, a: _Attempt, donor: int, took_now: bool, left: int) -> Reservation:
        reply = await self._taking(a.order_id, scripts.CLAIM, [a.buyers], [a.user_id, a.order_id])
        if reply[0] in (0, 1):  # 1: a retry of the buyer's found this unit and claimed it first
            outcome = Outcome.RESERVED if took_now else Outcome.REPLAY
            return Reservation(outcome, a.order_id, donor, left)
        # A double click won the home shard meanwhile, or a retry replaced this borrow once its
        # lease was over: hand the borrowed unit back.
        try:
            await self.release_unit(a.item_id, donor, a.order_id)
        except ShardUnavailable as exc:
            raise UnitMayBeHeld(exc, a.order_id) from None
        if reply[0] == 2:
            return Reservation(Outcome.ALREADY, reply[1].decode())
        raise ShardUnavailable(self._pipeline.node_of(a.buyers), "the buyer's borrow was replaced")

    async def _taking(
        self, order_id: str, script: scripts.Script, keys: list[str], args: list[Any]
    ) -> Any:
        """A call that may take (or keep) a unit under ``order_id``."""
        try:
            return await self._pipeline.call(script, keys, args)
        except ShardUnavailable as exc:
            raise UnitMayBeHeld(exc, order_id) from None

    async def _forget(self, a: _Attempt) -> None:
        """No shard lent a unit: drop the pending borrow so the buyer's next try starts afresh.
        If this fails, its lease runs out instead."""
        try:
            await self._pipeline.call(scripts.UNCLAIM, [a.buyers], [a.user_id, a.order_id])
        except ShardUnavailable:
            pass

    async def release_unit(self, item_id: int, unit_shard: int, order_id: str) -> bool:
        keys = shard_keys(item_id, unit_shard)
        released = await self._pipeline.call(
            scripts.RELEASE, [keys.stock, keys.orders, keys.outbox], [order_id]
        )
        return bool(released)


def pending_order(entry: bytes) -> str:
    """The orderId a dedup entry names, plain or pending borrow."""
    text = entry.decode()
    return text.rsplit("~", 1)[1] if text.startswith("~") else text
