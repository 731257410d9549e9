"""The expiry job: PENDING orders past their payment window become EXPIRED and their units go
back on sale (after the commit), clearing the sold-out flags of their items; RESERVED voucher
uses past their hold window become EXPIRED and go back too (flash ones in Redis, after the
commit)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import asyncpg

from domain.order_lifecycle import Ended, due_per_item, expire_due, release_units
from domain.voucher_lifecycle import due_uses_per_code, expire_due_vouchers, release_uses
from kernel.periodic import run_every, stopped_by_signals
from shard_router import ShardRouter, VoucherStore
from shard_router.stock_events import publish

log = logging.getLogger(__name__)

E = TypeVar("E")


async def _in_rounds(
    expire_due: Callable[[int], Awaitable[list[E]]],
    give_back: Callable[[list[E]], Awaitable[object]],
    limit: int,
    stop: asyncio.Event | None = None,
) -> int:
    """End what is due ``limit`` at a time (each round one transaction), giving each round's
    units back after its commit, until a round comes back short or ``stop`` is set (between
    rounds: a round is never left half done); returns how many ended."""
    total = 0
    while True:
        ended = await expire_due(limit)
        await give_back(ended)
        total += len(ended)
        if len(ended) < limit or (stop is not None and stop.is_set()):
            return total


async def expire_once(
    pool: asyncpg.Pool, router: ShardRouter, limit: int = 1000, stop: asyncio.Event | None = None
) -> int:
    """Expire what is due (or, once ``stop`` is set, what the current round holds); returns how
    many orders and voucher uses expired."""

    async def restock(ended: list[Ended]) -> None:
        for item_id in await release_units(router, ended):
            await publish(router.client, "restock", item_id)

    orders = await _in_rounds(lambda n: expire_due(pool, n), restock, limit, stop)
    return orders + await expire_vouchers_once(pool, VoucherStore(router), limit, stop)


async def expire_vouchers_once(
    pool: asyncpg.Pool, store: VoucherStore, limit: int = 1000, stop: asyncio.Event | None = None
) -> int:
    """Expire the voucher uses that are due; returns how many."""
    return await _in_rounds(
        lambda n: expire_due_vouchers(pool, n),
        lambda ended: release_uses(store, ended),
        limit,
        stop,
    )


@dataclass(frozen=True, slots=True)
class Due:
    """What ``expire_once`` would expire now: unpaid orders per item, held uses per code."""

    orders: dict[int, int]
    uses: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.orders.values()) + sum(self.uses.values())


async def due_now(pool: asyncpg.Pool) -> Due:
    """What is due, by the predicates the expiring statements select with; changes nothing
    (a row locked by a pass under way is counted: that pass, or the next, ends it)."""
    return Due(await due_per_item(pool), await due_uses_per_code(pool))


async def run_expiry(
    pool: asyncpg.Pool, router: ShardRouter, interval_s: float, stop: asyncio.Event
) -> None:
    """Rounds every ``interval_s`` until ``stop`` is set, or SIGTERM or SIGINT arrives: the round
    under way finishes first (its transaction committed and its units given back)."""

    async def step() -> None:
        expired = await expire_once(pool, router, stop=stop)
        if expired:
            log.info("expired %d orders and voucher uses", expired)

    log.info("expiry: a round every %.1f s until SIGTERM", interval_s)
    with stopped_by_signals(stop):
        await run_every(interval_s, step, stop, "expiry round")
    log.info("expiry stopped between rounds")
