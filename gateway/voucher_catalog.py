"""Voucher configuration cached in process, and the local OUT-OF-STOCK flags of flash vouchers.

Ordinary vouchers may number in the millions (one code per customer), so they are cached on
demand, each for ``ttl_s``; the flash vouchers live in the last hour are also refreshed in the
background (the outbox relay and /metrics walk them). Unknown codes are cached as missing for
``ttl_s`` too, so a flood of bad codes does not reach the database.
"""

from __future__ import annotations

import asyncio
import logging
import time

import asyncpg

from domain.vouchers import SELECT_VOUCHER, Voucher, voucher_of
from kernel.periodic import run_every

log = logging.getLogger(__name__)

_MAX_CACHED = 100_000


class VoucherCatalog:
    def __init__(self, pool: asyncpg.Pool, ttl_s: float) -> None:
        self.pool = pool
        self.ttl_s = ttl_s
        self._cached: dict[str, tuple[Voucher | None, float]] = {}
        self._flash: dict[str, Voucher] = {}

    async def get(self, code: str) -> Voucher | None:
        now = time.monotonic()
        hit = self._cached.get(code)
        if hit is not None and hit[1] > now:
            return hit[0]
        row = await self.pool.fetchrow(SELECT_VOUCHER + " where code = $1", code)
        voucher = None if row is None else voucher_of(row)
        self.remember(code, voucher, now)
        return voucher

    def remember(self, code: str, voucher: Voucher | None, now: float | None = None) -> None:
        if len(self._cached) >= _MAX_CACHED:
            self._cached.clear()
        self._cached[code] = (voucher, (now or time.monotonic()) + self.ttl_s)
        if voucher is not None and voucher.is_flash:
            self._flash[code] = voucher

    def live_flash(self) -> list[Voucher]:
        horizon = time.time() - 3600
        return [v for v in self._flash.values() if v.ends_at > horizon]

    async def refresh(self) -> None:
        rows = await self.pool.fetch(
            SELECT_VOUCHER + " where is_flash and ends_at > now() - interval '1 hour'"
        )
        self._flash = {row["code"]: voucher_of(row) for row in rows}

    async def run(self, stop: asyncio.Event) -> None:
        # A failed refresh keeps serving from the cache.
        await run_every(self.ttl_s, self.refresh, stop, "voucher catalog refresh")


class OutOfStockFlags:
    """A flash voucher seen with no use left answers 409 OUT_OF_STOCK with no I/O for ``ttl_s``.

    Not broadcast: each instance learns it from its own first loser, and the TTL bounds how
    long a use given back (release, expiry) stays invisible to an instance.
    """

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._until: dict[str, float] = {}

    def is_out(self, code: str) -> bool:
        until = self._until.get(code)
        return until is not None and until > time.monotonic()

    def mark(self, code: str) -> None:
        if len(self._until) >= _MAX_CACHED:
            self._until.clear()
        self._until[code] = time.monotonic() + self.ttl_s

    def clear(self, code: str) -> None:
        self._until.pop(code, None)
