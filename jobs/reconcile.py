"""Reconciliation of items (jobs/audit.py): per item, the database (quantity, sold, pending,
paid) against Redis (units left, holds, outbox per shard) and Kafka (the writer's lag).

Per item, in a quiet moment, these hold:
- Redis: units left + holds = quantity (no unit leaked or invented);
- every hold is an active order in the database, or still in flight (outbox or Kafka lag);
- every active order in the database has its hold in Redis (else a failover lost it and the
  unit could be sold twice: the database guard would refuse it, but the stock is wrong);
- ``sold`` = pending + paid.
Anything else is drift. ``--fix`` releases stale holds at any time; rebuilding a shard from the
database happens only while the item is paused.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from domain.arm import arm_item
from domain.order_lifecycle import ACTIVE, Ended, release_units
from jobs.audit import AUDIT_COLUMNS, HoldAudit, reconcile_each
from jobs.table import render
from jobs.writer_lag import writer_lag as writer_lag  # re-exported: the CLI, the load tests
from kernel.settings import Settings
from shard_router import ShardRouter


@dataclass
class ItemReport(HoldAudit[Ended]):
    item_id: int
    quantity: int
    sold: int
    pending: int
    paid: int
    paused: bool
    units_left: int = 0

    @property
    def unit_drift(self) -> int:
        return self.quantity - (self.units_left + self.holds)

    @property
    def drift(self) -> int:
        return abs(self.unit_drift) + self.hold_drift + abs(self.sold - (self.pending + self.paid))


async def reconcile_item(
    pool: asyncpg.Pool, router: ShardRouter, item_id: int, kafka_lag: int
) -> ItemReport:
    row = await pool.fetchrow(
        "select i.quantity, i.sold, i.shards, i.paused,"
        " count(*) filter (where o.status = 'PENDING') as pending,"
        " count(*) filter (where o.status = 'PAID') as paid"
        " from flash_sale_item i left join flash_sale_order o on o.item_id = i.id"
        " where i.id = $1 group by i.id",
        item_id,
    )
    if row is None:
        raise LookupError(f"item {item_id} does not exist")
    report = ItemReport(
        item_id,
        row["quantity"],
        row["sold"],
        row["pending"],
        row["paid"],
        row["paused"],
        kafka_lag=kafka_lag,
    )
    shards: int = row["shards"]
    holds: dict[str, Ended] = {}
    outboxed: set[str] = set()
    for state in await router.shard_states(item_id, shards):
        report.units_left += state.stock
        report.outbox += state.outbox
        for order_id, user_id in (await router.holds(item_id, state.shard)).items():
            holds[order_id] = Ended(order_id, item_id, shards, state.shard, user_id)
        outboxed.update((await router.outbox(item_id, state.shard)).keys())
    statuses = {
        str(r["id"]): r["status"]
        for r in await pool.fetch(
            "select id, status from flash_sale_order where item_id = $1", item_id
        )
    }
    report.audit_holds(holds, statuses, ACTIVE, outboxed)
    return report


async def reconcile(
    cfg: Settings,
    pool: asyncpg.Pool,
    router: ShardRouter,
    item_ids: list[int] | None = None,
    *,
    fix: bool = False,
) -> list[ItemReport]:
    """Every item of an armed sale (or these items); ``fix`` releases stale holds and rebuilds
    the shards of a drifted item that is paused."""
    if item_ids is None:
        item_ids = [
            r["id"]
            for r in await pool.fetch(
                "select i.id from flash_sale_item i join flash_sale s on s.id = i.sale_id"
                " where s.armed_at is not null order by i.id"
            )
        ]
    lag = writer_lag(cfg)

    async def check(item_id: int) -> ItemReport:
        return await reconcile_item(pool, router, item_id, lag)

    async def repair(report: ItemReport) -> bool:
        if report.stale:
            await release_units(router, report.stale)
        rebuild = report.paused and bool(report.unit_drift or report.lost or report.ghosts)
        if rebuild:
            await arm_item(pool, router, report.item_id)
        return bool(report.stale) or rebuild

    return await reconcile_each(item_ids, check, repair if fix else None)


_COLUMNS = f"item:>8 qty:>7 sold:>7 pending:>7 paid:>7 left:>7 {AUDIT_COLUMNS}"


def render_table(reports: list[ItemReport]) -> str:
    return render(
        _COLUMNS,
        (
            (r.item_id, r.quantity, r.sold, r.pending, r.paid, r.units_left, *r.audit_cells())
            for r in reports
        ),
    )
