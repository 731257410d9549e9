"""The expiry job: PENDING orders past their payment window become EXPIRED and their units go
back on sale (after the commit), clearing the sold-out flags of their items; RESERVED voucher
uses past their hold window become EXPIRED and go back too (flash ones in Redis, after the
commit)."""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from domain.order_lifecycle import expire_due, release_units
from domain.voucher_lifecycle import expire_due_vouchers, release_uses
from kernel.periodic import run_every
from shard_router import ShardRouter, VoucherStore
from shard_router.stock_events import publish

log = logging.getLogger(__name__)


async def expire_once(pool: asyncpg.Pool, router: ShardRouter, limit: int = 1000) -> int:
    """Expire what is due, in rounds of ``limit``; returns how many orders and voucher uses
    expired."""
    total = 0
    while True:
        ended = await expire_due(pool, limit)
        for item_id in await release_units(router, ended):
            await publish(router.client, "restock", item_id)
        total += len(ended)
        if len(ended) < limit:
            return total + await expire_vouchers_once(pool, VoucherStore(router), limit)


async def expire_vouchers_once(pool: asyncpg.Pool, store: VoucherStore, limit: int = 1000) -> int:
    """Expire the voucher uses that are due, in rounds of ``limit``; returns how many."""
    total = 0
    while True:
        ended = await expire_due_vouchers(pool, limit)
        await release_uses(store, ended)
        total += len(ended)
        if len(ended) < limit:
            return total


async def run_expiry(
    pool: asyncpg.Pool, router: ShardRouter, interval_s: float, stop: asyncio.Event
) -> None:
    async def step() -> None:
        expired = await expire_once(pool, router)
        if expired:
            log.info("expired %d orders and voucher uses", expired)

    await run_every(interval_s, step, stop, "expiry round")
