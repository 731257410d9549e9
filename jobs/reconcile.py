"""Reconciliation of items (jobs/audit.py): per item, the database (quantity, sold, pending,
paid) against Redis (units left, holds, outbox per shard) and Kafka (the writer's lag).

Per item, in a quiet moment, these hold:
- Redis: units left + holds = quantity (no unit leaked or invented);
- every hold is an active order in the database, or still in flight (outbox or Kafka lag);
- every active order in the database has its hold in Redis (else a failover lost it and the
  unit could be sold twice: the database guard would refuse it, but the stock is wrong);
- ``sold`` = pending + paid;
- no outbox entry outlives its sale by more than a payment window (the relay stops there).
Anything else is drift. ``fix`` repairs what is safe while buyers buy (stale holds released,
stuck outbox entries delivered) at any time; rebuilding a shard from the database (``rebuild``)
happens only while the item is paused.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

import asyncpg

from domain.arm import arm_item
from domain.give_back import give_back
from domain.order_lifecycle import ACTIVE, SOLD_OUT, Ended, release_ended
from jobs.audit import AUDIT_COLUMNS, HoldAudit, Reconciliation, Stuck, add_dead_lettered
from jobs.outbox_delivery import deliver
from jobs.repairs import repaired
from jobs.table import render
from jobs.writer_lag import writer_lag as writer_lag  # re-exported: the CLI, the load tests
from kernel.events import OrderPlaced
from kernel.settings import Settings
from shard_router import ShardRouter
from shard_router.reassert import forfeit_order
from shard_router.stock_events import publish


@dataclass
class ItemReport(HoldAudit[Ended, int]):
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


_ITEM = """
select i.quantity, i.sold, i.shards, i.paused,
       now() > s.ends_at + make_interval(secs => s.payment_window_seconds) as relay_done,
       count(*) filter (where o.status = 'PENDING') as pending,
       count(*) filter (where o.status = 'PAID') as paid,
       count(*) filter (where o.status = 'FAILED') as failed
from flash_sale_item i join flash_sale s on s.id = i.sale_id
left join flash_sale_order o on o.item_id = i.id
where i.id = $1 group by i.id, s.id
"""


async def reconcile_item(
    pool: asyncpg.Pool, router: ShardRouter, item_id: int, kafka_lag: int
) -> ItemReport:
    row = await pool.fetchrow(_ITEM, item_id)
    if row is None:
        raise LookupError(f"item {item_id} does not exist")
    report = ItemReport(
        item_id,
        row["quantity"],
        row["sold"],
        row["pending"],
        row["paid"],
        row["paused"],
        failed=row["failed"],
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
        entries = await router.outbox(item_id, state.shard) if state.outbox else {}
        if row["relay_done"]:  # no gateway relays this sale's outboxes any more
            report.stuck += [Stuck(state.shard, o, payload) for o, payload in entries.items()]
        else:
            outboxed.update(entries)
    rows = await pool.fetch(
        "select id::text as id, status, failure_reason from flash_sale_order where item_id = $1",
        item_id,
    )
    statuses = {r["id"]: r["status"] for r in rows}
    await add_dead_lettered(pool, "orders", holds, statuses)
    refused = {r["id"] for r in rows if (r["failure_reason"] or "").startswith(SOLD_OUT)}
    report.audit_holds(holds, statuses, ACTIVE, outboxed, refused)
    return report


async def _end_stale(router: ShardRouter, report: ItemReport) -> int:
    """Release the stale holds, forfeit those refused for capacity; how many units went back."""
    released = await release_ended(
        router, [o for o in report.stale if o.order_id not in report.forfeit]
    )
    repaired("released_hold", len(released))
    forfeited = await give_back(
        [o for o in report.stale if o.order_id in report.forfeit],
        lambda o: forfeit_order(router, o.item_id, o.shards, o.unit_shard, o.user_id, o.order_id),
    )
    repaired("forfeited_hold", len(forfeited))
    return len(released)


async def repair_item(
    cfg: Settings, pool: asyncpg.Pool, router: ShardRouter, report: ItemReport, rebuild: bool
) -> bool:
    """Deliver its stuck outbox entries and end its stale holds, both safe on sale; with
    ``rebuild``, reload a drifted paused item's shards. Whether anything was done."""

    def ack(shard: int, order_ids: list[str]) -> asyncio.Future[object]:
        return router.ack_outbox(report.item_id, shard, order_ids)

    delivered = await deliver(cfg, cfg.orders_topic, OrderPlaced, report.stuck, ack)
    repaired("delivered_outbox_entry", delivered)
    if await _end_stale(router, report):  # gateways drop its sold-out flag, as after expiry
        await publish(router.client, "restock", report.item_id)
    drifted = bool(report.unit_drift or report.lost or report.ghosts)
    rebuilt = rebuild and report.paused and drifted
    if rebuilt:
        await arm_item(pool, router, report.item_id)
        repaired("rebuilt_item", 1)
    return bool(delivered or report.stale or rebuilt)


# Items whose sale is armed and ended less than a day ago (or has not): what the gateways keep
# in their catalogs too. An older one needs --item.
_RECENT = """
select i.id from flash_sale_item i join flash_sale s on s.id = i.sale_id
where s.armed_at is not null and s.ends_at > now() - interval '1 day' order by i.id
"""


# Every item of a sale armed and ended less than a day ago (or these items); ``fix`` repairs what
# is safe on sale, and with ``rebuild`` the shards of a drifted paused item.
reconcile: Final[Reconciliation[int, ItemReport, ShardRouter]] = Reconciliation(
    recent=_RECENT,
    lag=writer_lag,  # the orders topic, the writer's group
    check=lambda cfg, pool, router, item_id, lag: reconcile_item(pool, router, item_id, lag),
    repair=repair_item,
)


_COLUMNS = f"item:>8 qty:>7 sold:>7 pending:>7 paid:>7 left:>7 {AUDIT_COLUMNS}"


def render_table(reports: list[ItemReport]) -> str:
    return render(
        _COLUMNS,
        (
            (r.item_id, r.quantity, r.sold, r.pending, r.paid, r.units_left, *r.audit_cells())
            for r in reports
        ),
    )
