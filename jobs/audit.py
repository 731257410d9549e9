"""Reconciliation's one mechanism, the same for an item's orders and a flash voucher's uses:
Redis's holds against the database's rows, then repairs, then a second look.

Each hold in Redis is an active order (redemption) in the database, or still in flight (in an
outbox, or Kafka has messages the writer has not committed), else it is a *ghost*; a hold whose
order the database has ended is *stale*: releasing it is always safe (release is idempotent). An
active order whose hold Redis no longer has was *lost* (a failover).
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Collection, Container, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

E = TypeVar("E")  # a hold, as the domain releases it (Ended, EndedUse)
K = TypeVar("K")  # an item id, a voucher code
R = TypeVar("R")  # a report

# The columns every report ends with, filled by HoldAudit.audit_cells() (jobs/table.py).
AUDIT_COLUMNS = "holds:>7 outbox:>6 flight:>6 stale:>5 ghost:>5 lost:>5 lag:>6 drift:>5"


@dataclass(kw_only=True)
class HoldAudit(abc.ABC, Generic[E]):
    """What a report says about the holds of one item or voucher."""

    holds: int = 0
    outbox: int = 0
    in_flight: int = 0
    stale: list[E] = field(default_factory=list)
    ghosts: int = 0  # holds with no order anywhere and nothing in flight
    lost: int = 0  # active orders whose hold Redis no longer has
    kafka_lag: int = 0

    @property
    def hold_drift(self) -> int:
        """Holds Redis should not have, or should have and has not."""
        return len(self.stale) + self.ghosts + self.lost

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
    ) -> None:
        """Sort Redis's ``holds`` (orderId → the hold, as the domain would release it) by the
        database's ``statuses`` (orderId → status, every order of this item or voucher);
        ``active`` are the statuses that hold a unit."""
        self.holds = len(holds)
        for order_id, hold in holds.items():
            status = statuses.get(order_id)
            if status in active:
                continue
            if status is not None:
                self.stale.append(hold)
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
            len(self.stale),
            self.ghosts,
            self.lost,
            self.kafka_lag,
            self.drift,
        )


async def reconcile_each(
    keys: list[K],
    check: Callable[[K], Awaitable[R]],
    repair: Callable[[R], Awaitable[bool]] | None,
) -> list[R]:
    """``check`` each one; with ``repair``, repair each report, and check again if any repair
    did something (``repair`` answers whether it did), so the reports say how things are now."""
    reports = [await check(key) for key in keys]
    if repair is None:
        return reports
    repaired = [await repair(report) for report in reports]
    if any(repaired):
        reports = [await check(key) for key in keys]
    return reports
