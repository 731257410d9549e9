"""Reconciliation's one mechanism, the same for an item's orders and a flash voucher's uses:
Redis's holds against the database's rows, then repairs, then a second look.

Each hold in Redis is an active order (redemption) in the database, or still in flight (in an
outbox, or Kafka has messages the writer has not committed), else it is a *ghost*; a hold whose
order the database has ended, or whose event the writer dead-lettered with no row to store, is
*stale*: releasing it is always safe, on sale or not (release is
idempotent, and only the call that removes the hold record gives the unit back), except that one
the writer refused for capacity is forfeited (its hold dropped, its unit not given back: Redis
granted a unit it did not have, and giving it back would sell it again). An active order
whose hold Redis no longer has was *lost* (a failover). An outbox entry no relay visits any more
(its sale or voucher ended longer ago than a hold can last) is *stuck*, not in flight: delivering
it to Kafka is as safe as the relay's re-send (the writer stores an orderId once).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable, Collection, Container, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, TypeVar

import asyncpg

from kernel.settings import Settings

E = TypeVar("E")  # a hold, as the domain releases it (Ended, EndedUse)
K = TypeVar("K")  # an item id, a voucher code
P = TypeVar("P")  # where an outbox is: an item's shard, a voucher's code

# The columns every report ends with, filled by HoldAudit.audit_cells() (jobs/table.py).
AUDIT_COLUMNS = (
    "holds:>7 outbox:>6 flight:>6 stuck:>5 stale:>5 ghost:>5 lost:>5 failed:>6 lag:>6 drift:>5"
)


@dataclass(frozen=True, slots=True)
class Stuck(Generic[P]):
    """An outbox entry that no relay will send any more."""

    place: P
    order_id: str
    payload: bytes


@dataclass(kw_only=True)
class HoldAudit(abc.ABC, Generic[E, P]):
    """What a report says about the holds of one item or voucher."""

    holds: int = 0
    outbox: int = 0
    in_flight: int = 0
    stuck: list[Stuck[P]] = field(default_factory=list)
    stale: list[E] = field(default_factory=list)
    forfeit: set[str] = field(default_factory=set)  # the stale ones refused for capacity
    ghosts: int = 0  # holds with no order anywhere and nothing in flight
    lost: int = 0  # active orders whose hold Redis no longer has
    failed: int = 0  # orders (uses) the writer refused: not drift, but worth a graph
    kafka_lag: int = 0

    @property
    def hold_drift(self) -> int:
        """Holds Redis should not have, or should have and has not, and events stuck on their
        way to Kafka."""
        return len(self.stuck) + len(self.stale) + self.ghosts + self.lost

    @property
    @abc.abstractmethod
    def drift(self) -> int:
        """Disagreements beyond what is in flight; 0 means Redis and the database agree."""

    def audit_holds(
        self,
        holds: Mapping[str, E],
        statuses: Mapping[str, str],
        active: Collection[str],
        outboxed: Container[str],
        refused: Container[str] = (),
    ) -> None:
        """Sort Redis's ``holds`` (orderId → the hold, as the domain would release it) by the
        database's ``statuses`` (orderId → status, every order of this item or voucher);
        ``active`` are the statuses that hold a unit, ``outboxed`` the orderIds in an outbox
        that a relay still sends, ``refused`` those the writer refused for capacity. A hold
        whose entry is stuck counts once, as stuck."""
        self.holds = len(holds)
        stuck = {entry.order_id for entry in self.stuck}
        for order_id, hold in holds.items():
            status = statuses.get(order_id)
            if status in active:
                continue
            if status is not None:
                self.stale.append(hold)
                if order_id in refused:
                    self.forfeit.add(order_id)
            elif order_id in stuck:
                continue
            elif order_id in outboxed or self.kafka_lag > 0:
                self.in_flight += 1
            else:
                self.ghosts += 1
        self.lost = len({o for o, s in statuses.items() if s in active} - holds.keys())

    def audit_cells(self) -> tuple[object, ...]:
        """This report's cells under AUDIT_COLUMNS."""
        return (
            self.holds,
            self.outbox,
            self.in_flight,
            len(self.stuck),
            len(self.stale),
            self.ghosts,
            self.lost,
            self.failed,
            self.kafka_lag,
            self.drift,
        )


A = TypeVar("A", bound=HoldAudit[Any, Any])  # a report

# A hold's status when the writer dead-lettered its event with no row to store (undecodable,
# unsupported, invalid): not active, so the hold is stale and released once, not a ghost.
DEAD_LETTERED = "DEAD_LETTERED"
_DEAD_LETTERED = """
select order_id from dead_lettered_event where stream = $1 and order_id = any($2::text[])
"""


async def add_dead_lettered(
    pool: asyncpg.Pool, stream: str, holds: Collection[str], statuses: dict[str, str]
) -> None:
    """Give DEAD_LETTERED to each of ``holds`` with no row in ``statuses`` whose event the
    writer's ``stream`` ("orders", "vouchers": FLASHSALE_WRITER_STREAMS' words) dead-lettered."""
    rowless = [order_id for order_id in holds if order_id not in statuses]
    if rowless:
        for row in await pool.fetch(_DEAD_LETTERED, stream, rowless):
            statuses[row["order_id"]] = DEAD_LETTERED


async def reconcile_each(
    keys: list[K],
    lag: Callable[[], int],
    check: Callable[[K, int], Awaitable[A]],
    repair: Callable[[A], Awaitable[bool]] | None,
) -> list[A]:
    """``check`` each one, given the writer's ``lag()`` (blocking: read in a thread before the
    first check); with ``repair``, repair each report, and check again those a repair did
    something to (``repair`` answers whether it did), so the reports say how things are now. A
    repair that had stuck entries to deliver has the lag read again: what it delivered is the
    writer's lag now, not drift."""
    lagging: int | None = None

    async def checked(key: K) -> A:
        nonlocal lagging
        if lagging is None:
            lagging = await asyncio.to_thread(lag)
        return await check(key, lagging)

    reports = [await checked(key) for key in keys]
    if repair is None:
        return reports

    async def repaired(report: A) -> bool:
        nonlocal lagging
        if report.stuck:
            lagging = None
        return await repair(report)

    return [
        await checked(key) if await repaired(report) else report
        for key, report in zip(keys, reports, strict=True)
    ]


S = TypeVar("S")  # the Redis side a kind's checks and repairs call: the router, a voucher store


@dataclass(frozen=True)
class Reconciliation(Generic[K, A, S]):
    """What reconciling one kind of target (items: jobs/reconcile.py, flash and ordinary
    vouchers: jobs/voucher_reconcile.py) differs in; calling it reconciles them, one way for
    both (reconcile_each)."""

    recent: str  # SQL, one column: the keys checked when none are given (lately live), in order
    lag: Callable[[Settings], int]  # the writer's lag on the kind's topic (blocking)
    check: Callable[[Settings, asyncpg.Pool, S, K, int], Awaitable[A]]  # a key's report, given lag
    # Repairs a report (the bool: ``rebuild``); whether it did anything.
    repair: Callable[[Settings, asyncpg.Pool, S, A, bool], Awaitable[bool]]

    async def __call__(
        self,
        cfg: Settings,
        pool: asyncpg.Pool,
        redis: S,
        keys: list[K] | None = None,
        *,
        fix: bool = False,
        rebuild: bool = True,
    ) -> list[A]:
        """The targets of ``recent`` (or these ``keys``); ``fix`` repairs what is safe on sale,
        and with ``rebuild`` also what needs the target paused (a kind with no such repair
        ignores it)."""
        if keys is None:
            keys = [r[0] for r in await pool.fetch(self.recent)]

        def check(key: K, lag: int) -> Awaitable[A]:
            return self.check(cfg, pool, redis, key, lag)

        def repair(report: A) -> Awaitable[bool]:
            return self.repair(cfg, pool, redis, report, rebuild)

        return await reconcile_each(keys, partial(self.lag, cfg), check, repair if fix else None)
