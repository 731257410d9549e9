"""The invariants a load run must keep, checked against PostgreSQL and Redis after the writer
has drained (RELIABILITY.md, "Invariants the checker asserts after every run"):

- units sold <= quantity (the database's ``sold`` and active orders, and Redis's holds);
- no buyer over the limit: at most one active (PENDING or PAID) order per buyer and item;
- every 202 is an order in the database;
- drift 0 after drain: ``jobs.reconcile`` finds Redis and the database in agreement
  (units left + holds = quantity, no ghost, stale or lost hold, sold = pending + paid).

    checks = check_invariants(cfg, [item_id], accepted_order_ids)
    print(render(checks)); ok = all(c.passed for c in checks)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Sequence
from typing import NamedTuple

import asyncpg

from jobs.reconcile import ItemReport, reconcile, writer_lag
from kernel.settings import Settings
from shard_router import ShardRouter

DRAIN_TIMEOUT_S = 120.0
SETTLE_TIMEOUT_S = 15.0  # after the drain, for in-flight holds and the outbox relay to settle
POLL_S = 0.25


class Check(NamedTuple):
    name: str
    passed: bool
    detail: str


def check_invariants(
    cfg: Settings,
    item_ids: Sequence[int],
    accepted: Collection[str],
    *,
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
) -> list[Check]:
    """Wait for the writer to drain, then check every invariant (blocking; its own event loop)."""
    return asyncio.run(_check(cfg, list(item_ids), set(accepted), drain_timeout_s))


async def _check(
    cfg: Settings, item_ids: list[int], accepted: set[str], drain_timeout_s: float
) -> list[Check]:
    pool = await asyncpg.create_pool(cfg.pg_dsn, min_size=1, max_size=2, command_timeout=30)
    router = ShardRouter(cfg)
    try:
        await router.start()
        drained = await wait_for_drain(cfg, pool, accepted, drain_timeout_s)
        reports = await settled_reports(cfg, pool, router, item_ids)
        return [
            drained,
            await units_within_quantity(pool, item_ids, reports),
            await one_active_order_per_buyer(pool, item_ids),
            await every_202_is_an_order(pool, accepted),
            no_drift(reports),
        ]
    finally:
        await router.close()
        await pool.close()


async def _stored(pool: asyncpg.Pool, order_ids: set[str]) -> set[str]:
    rows = await pool.fetch(
        "select id::text as id from flash_sale_order where id = any($1::uuid[])", list(order_ids)
    )
    return {r["id"] for r in rows}


async def wait_for_drain(
    cfg: Settings, pool: asyncpg.Pool, accepted: set[str], timeout_s: float
) -> Check:
    """Until every 202 is stored and the writer's group has no lag on the orders topic."""
    started = time.monotonic()
    stored, lag = 0, -1
    while True:
        stored = len(await _stored(pool, accepted))
        lag = await asyncio.to_thread(writer_lag, cfg)
        elapsed = time.monotonic() - started
        if stored == len(accepted) and lag == 0:
            return Check("writer drained", True, f"in {elapsed:.1f}s, orders topic lag 0")
        if elapsed > timeout_s:
            detail = f"after {timeout_s:.0f}s: {stored} of {len(accepted)} stored, lag {lag}"
            return Check("writer drained", False, detail)
        await asyncio.sleep(POLL_S)


async def settled_reports(
    cfg: Settings, pool: asyncpg.Pool, router: ShardRouter, item_ids: list[int]
) -> list[ItemReport]:
    """Reconciliation once nothing is in flight any more (or the settle time is up)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        reports = await reconcile(cfg, pool, router, item_ids)
        quiet = all(r.in_flight == 0 and r.outbox == 0 and r.kafka_lag == 0 for r in reports)
        if (quiet and all(r.drift == 0 for r in reports)) or time.monotonic() > deadline:
            return reports
        await asyncio.sleep(POLL_S * 2)


async def units_within_quantity(
    pool: asyncpg.Pool, item_ids: list[int], reports: list[ItemReport]
) -> Check:
    rows = await pool.fetch(
        "select i.id, i.quantity, i.sold,"
        " count(o.id) filter (where o.status in ('PENDING', 'PAID')) as active"
        " from flash_sale_item i left join flash_sale_order o on o.item_id = i.id"
        " where i.id = any($1::bigint[]) group by i.id order by i.id",
        item_ids,
    )
    holds = {r.item_id: r.holds for r in reports}
    over = [
        r["id"] for r in rows if max(r["sold"], r["active"], holds.get(r["id"], 0)) > r["quantity"]
    ]
    detail = "; ".join(
        f"item {r['id']}: sold {r['sold']}, active orders {r['active']}, "
        f"Redis holds {holds.get(r['id'], '?')} of {r['quantity']}"
        for r in rows
    )
    if len(rows) != len(item_ids):
        return Check("units sold <= quantity", False, f"items missing from the database; {detail}")
    return Check("units sold <= quantity", not over, detail)


async def one_active_order_per_buyer(pool: asyncpg.Pool, item_ids: list[int]) -> Check:
    over = await pool.fetchval(
        "select count(*) from (select item_id, user_id from flash_sale_order"
        " where item_id = any($1::bigint[]) and status in ('PENDING', 'PAID')"
        " group by item_id, user_id having count(*) > 1) t",
        item_ids,
    )
    most = await pool.fetchval(
        "select coalesce(max(n), 0) from (select count(*) as n from flash_sale_order"
        " where item_id = any($1::bigint[]) group by item_id, user_id) t",
        item_ids,
    )
    detail = f"{over} buyers with more than 1 active order; at most {most} orders of any status"
    return Check("no buyer over the limit (1 active order)", over == 0, detail)


async def every_202_is_an_order(pool: asyncpg.Pool, accepted: set[str]) -> Check:
    missing = accepted - await _stored(pool, accepted)
    detail = f"{len(accepted) - len(missing)} of {len(accepted)} orderIds answered 202 stored"
    if missing:
        detail += "; missing e.g. " + ", ".join(sorted(missing)[:3])
    return Check("every 202 is an order", not missing, detail)


def no_drift(reports: list[ItemReport]) -> Check:
    drift = sum(r.drift for r in reports)
    parts = [
        f"item {r.item_id}: left {r.units_left} + holds {r.holds} of {r.quantity}, "
        f"stale {len(r.stale)}, ghosts {r.ghosts}, lost {r.lost}, in flight {r.in_flight}"
        for r in reports
    ]
    return Check(
        "drift 0 after drain (reconcile)", drift == 0, f"drift {drift}; " + "; ".join(parts)
    )


def render(checks: Sequence[Check]) -> str:
    width = max((len(c.name) for c in checks), default=0)
    return "\n".join(
        f"  {'PASS' if c.passed else 'FAIL'}  {c.name:<{width}}  {c.detail}" for c in checks
    )
