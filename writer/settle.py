"""Step 4 of the writer's loop (writer/consumer.py): Redis, once a batch is stored. In this order,
every call idempotent, so a redelivered batch repeats them to the same end state:

1. give back what each refused row holds: its hold and its unit (release), or, when it was
   refused for capacity, its hold alone (forfeit: Redis granted a unit the database did not
   have; putting it back would sell it again, to be refused again). Before 2, so that a unit
   given back is there for a forgotten hold to take;
2. re-assert the holds the database says Redis must have (Written.holders): a failover may have
   promoted a replica that never got a reservation. A missing hold is written back with a unit
   taken from the stock, or with none when the stock is 0 (the forgotten unit was sold again:
   the database refuses the extra row for capacity, which forfeits it);
3. a hold step 2 wrote back whose row has ended since it was stored (a cancel or expiry that
   released it before step 2) goes again as step 2 took it: released when it took a unit,
   forfeited when it took none;
4. drop the stored rows' events from their outboxes (sent with step 2's calls).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from shard_router import ShardRouter
from shard_router.reassert import Reasserted, Restored
from writer import metrics
from writer.batch import E
from writer.retry import Backoff, db_retriable, redis_retriable, retrying
from writer.sink import Sink, Written
from writer.stream import GIVEN_BACK, Decision, Holder, Locked, Stream

log = logging.getLogger(__name__)

T = TypeVar("T")

# Calls sent per round when re-asserting a whole target: each round is one pipelined batch per
# node, which must be answered within the Redis deadline; a thousand tiny scripts are well
# inside it.
CHUNK = 1000
_WROTE = (Restored.RESTORED, Restored.UNBACKED)  # a hold step 2 wrote back


class Settler(Generic[E]):
    def __init__(self, sink: Sink[E], router: ShardRouter, backoff: Backoff) -> None:
        self.sink = sink
        self.stream: Stream[E, Any] = sink.stream
        self.router = router
        self.backoff = backoff

    async def settle(self, written: Written[E]) -> None:
        # Once per hold: a row refused for two targets (batches split one by one) holds two.
        refused = {
            (d.row.target, d.row.order_id): d for d in written.decisions if d.fate in GIVEN_BACK
        }
        # A refused row is never active; a voucher conflict's hold (code, orderId) is also the
        # stored customer's, re-asserted after the release frees it.
        holders = written.holders
        drops = self._drops(written)
        # What step 2 wrote, kept across attempts: a retried attempt finds it PRESENT.
        wrote: dict[Holder, Restored] = {}

        async def attempt() -> None:
            await _all(self._give_back(d, written.locked) for d in refused.values())
            found, _ = await asyncio.gather(
                _all(self._reassert(h, written.locked) for h in holders),
                _all(self.stream.drop(self.router, box, ids) for box, ids in drops.items()),
            )
            for holder, reasserted in zip(holders, found, strict=True):
                if reasserted is not None and reasserted.hold in _WROTE:
                    wrote[holder] = reasserted.hold

        if refused or holders or drops:
            await retrying("redis", attempt, redis_retriable, self.backoff)
        if wrote:
            await self._undo_ended(wrote, written.locked)

    def _drops(self, written: Written[E]) -> dict[Hashable, list[str]]:
        """Step 4: the stored rows' order ids, by the outbox holding their events."""
        drops: defaultdict[Hashable, set[str]] = defaultdict(set)
        for d in written.decisions:
            if (outbox := self.stream.outbox(d)) is not None:
                drops[outbox].add(d.row.order_id)
        return {outbox: sorted(ids) for outbox, ids in drops.items()}

    async def _give_back(self, decision: Decision[E], locked: Locked) -> None:
        holder = self.stream.holder(decision.row)
        if decision.forfeit:
            if await self.stream.forfeit(self.router, holder, locked):
                metrics.FORFEITED.labels(self.stream.name).inc()
                self._log("forfeited: its hold dropped, its unit not given back", decision)
        elif await self.stream.release(self.router, holder, locked):
            self._log("given back", decision)

    def _log(self, what: str, decision: Decision[E]) -> None:
        noun, order_id = self.stream.noun, decision.row.order_id
        log.info("%s %s refused (%s): %s", noun, order_id, decision.reason, what)

    async def _reassert(self, holder: Holder, locked: Locked) -> Reasserted | None:
        reasserted = await self.stream.reassert(self.router, holder, locked)
        if reasserted is not None and reasserted.wrote:
            for part, outcome in (("hold", reasserted.hold), ("buyer", reasserted.buyer)):
                if outcome in _WROTE:
                    metrics.REASSERTED.labels(self.stream.name, part, outcome.value).inc()
            log.warning(
                "%s %s of %s was stored but Redis had forgotten it (a failover?): hold %s,"
                " buyer entry %s",
                self.stream.noun,
                holder.order_id,
                holder.target,
                reasserted.hold.value,
                reasserted.buyer.value,
            )
        return reasserted

    async def _undo_ended(self, wrote: dict[Holder, Restored], locked: Locked) -> None:
        async def ended() -> list[Holder]:
            return await self.sink.ended(list(wrote))

        gone = await retrying("db", ended, db_retriable, self.backoff)
        if not gone:
            return

        async def undo() -> None:
            await _all(self._undo(h, wrote[h], locked) for h in gone)

        await retrying("redis", undo, redis_retriable, self.backoff)

    def _undo(self, holder: Holder, took: Restored, locked: Locked) -> Awaitable[bool]:
        again = "released" if took is Restored.RESTORED else "forfeited"
        log.info("%s %s ended as it was re-asserted: %s", self.stream.noun, holder.order_id, again)
        if took is Restored.RESTORED:
            return self.stream.release(self.router, holder, locked)
        return self.stream.forfeit(self.router, holder, locked)


async def _all(calls: Iterable[Awaitable[T]]) -> list[T]:
    """Await ``calls`` CHUNK at a time (each round one pipelined batch per node); the results in
    order. Every call of a round runs even if one fails; then the first failure is raised."""
    results: list[T] = []
    round_: list[Awaitable[T]] = []

    async def flush() -> None:
        for outcome in await asyncio.gather(*round_, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome
            results.append(outcome)
        round_.clear()

    for call in calls:
        round_.append(call)
        if len(round_) >= CHUNK:
            await flush()
    if round_:
        await flush()
    return results
