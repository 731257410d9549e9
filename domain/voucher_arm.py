"""Arm / warm-up a flash voucher: load its uses into Redis from the database (domain/warm_up.py).

Uses left = ``total_limit − used_count − kept``. The active redemptions' (RESERVED, CONFIRMED)
hold records are added where Redis lacks them, every hold Redis has is kept (one of an ended
redemption is released by reconciliation), the customers' counts are recounted from the holds,
and the ended redemptions are remembered, so a retry of a released orderId is still refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import asyncpg

from domain.arm import check_cluster_ready
from domain.errors import NotReady
from domain.ports import VoucherLoader
from domain.voucher_lifecycle import ACTIVE
from domain.warm_up import Count, Hold, Stored, warm_up

# How the writer's failure_reason for a refusal for the voucher's limit begins
# (writer/streams.py): that use's hold is forfeited, its use never given back.
OUT_OF_STOCK = "out of stock"


@dataclass(frozen=True, slots=True)
class ArmedVoucher:
    code: str
    remaining: int
    held: int  # active uses in the database
    in_flight: int  # holds kept from Redis that used_count does not count (in flight, ended)


@dataclass(slots=True)
class _FlashVoucher:
    """A flash voucher as warm-up's Stock: one place, its code (its uses are not sharded)."""

    pool: asyncpg.Pool
    store: VoucherLoader
    code: str
    dry_run: bool = False  # compute what would be loaded; load nothing
    ended: list[tuple[str, int]] = field(default_factory=list)  # found by stored(), for load()

    @property
    def places(self) -> tuple[str]:
        return (self.code,)

    async def holds(self, place: str) -> Mapping[str, int]:
        return await self.store.holds(place)

    async def counts(self) -> Mapping[str, Count]:
        state = await self.store.state(self.code)
        return {self.code: Count(state.remaining or 0, state.holds)}

    async def stored(self) -> Stored[str]:
        code = self.code
        # One snapshot for used_count and the rows: a use the writer stores meanwhile is then
        # either in both, or in neither (and found among Redis's holds, as in flight).
        async with (
            self.pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            voucher = await conn.fetchrow(
                "select total_limit, used_count, is_flash from voucher where code = $1", code
            )
            rows = await conn.fetch(
                "select order_id, customer_id, status, failure_reason from voucher_redemption"
                " where voucher_code = $1",
                code,
            )
        if voucher is None:
            raise NotReady(f"voucher {code} does not exist")
        if not voucher["is_flash"]:
            raise NotReady(f"voucher {code} is not a flash voucher: it needs no arming")
        active = [
            Hold(r["order_id"], r["customer_id"], code) for r in rows if r["status"] in ACTIVE
        ]
        self.ended = [(r["order_id"], r["customer_id"]) for r in rows if r["status"] not in ACTIVE]
        # A hold of an ended redemption is not in used_count: kept, counted like one in flight.
        unbacked = frozenset(
            r["order_id"]
            for r in rows
            if r["status"] == "FAILED" and (r["failure_reason"] or "").startswith(OUT_OF_STOCK)
        )
        return Stored(voucher["total_limit"], voucher["used_count"], active, unbacked)

    async def load(self, place: str, units: int, holds: list[Hold[str]]) -> None:
        if self.dry_run:
            return
        await self.store.load(place, units, [(h.order_id, h.owner) for h in holds], self.ended)


async def arm_voucher(
    pool: asyncpg.Pool,
    store: VoucherLoader,
    code: str,
    *,
    require_replicas: bool = True,
    dry_run: bool = False,
) -> ArmedVoucher:
    """Arm it; ``dry_run``: the same reads and refusals, and what arming would leave, with
    nothing written (warm-up's only write is its load)."""
    if require_replicas:
        await check_cluster_ready(store.router)
    warmed = await warm_up(_FlashVoucher(pool, store, code, dry_run))
    return ArmedVoucher(code, warmed.units, warmed.active, warmed.in_flight)
