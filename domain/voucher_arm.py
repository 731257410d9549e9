"""Arm / warm-up a flash voucher: load its uses into Redis from the database.

Uses left = ``total_limit − used_count − in flight``, where in flight counts the holds Redis
already has that the writer has not stored yet; never ``total_limit`` alone, so a Redis restart
never hands a use out twice. The hold records and the customers' counts are rebuilt from the
active redemptions (RESERVED, CONFIRMED), and the ended ones are remembered, so a retry of a
released orderId is still refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from domain.arm import check_cluster_ready
from domain.errors import NotReady
from domain.voucher_lifecycle import ACTIVE
from shard_router.vouchers import VoucherStore


@dataclass(frozen=True, slots=True)
class ArmedVoucher:
    code: str
    remaining: int
    held: int  # active uses in the database
    in_flight: int  # holds in Redis not yet in the database


async def arm_voucher(
    pool: asyncpg.Pool, store: VoucherStore, code: str, *, require_replicas: bool = True
) -> ArmedVoucher:
    if require_replicas:
        await check_cluster_ready(store.router)
    if await store.outbox(code):
        raise NotReady(f"voucher {code} has uses in flight (outbox not empty)")
    # One snapshot for used_count and the rows: a use the writer stores meanwhile is then either
    # in both, or in neither (and found below among Redis's holds, as in flight).
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        voucher = await conn.fetchrow(
            "select total_limit, used_count, is_flash from voucher where code = $1", code
        )
        rows = await conn.fetch(
            "select order_id, customer_id, status from voucher_redemption where voucher_code = $1",
            code,
        )
    if voucher is None:
        raise NotReady(f"voucher {code} does not exist")
    if not voucher["is_flash"]:
        raise NotReady(f"voucher {code} is not a flash voucher: it needs no arming")
    stored = {r["order_id"] for r in rows}
    holds = [(r["order_id"], r["customer_id"]) for r in rows if r["status"] in ACTIVE]
    ended = [(r["order_id"], r["customer_id"]) for r in rows if r["status"] not in ACTIVE]
    in_flight = [(o, c) for o, c in (await store.holds(code)).items() if o not in stored]
    remaining = max(0, voucher["total_limit"] - voucher["used_count"] - len(in_flight))
    await store.load(code, remaining, holds + in_flight, ended)
    return ArmedVoucher(code, remaining, len(holds), len(in_flight))
