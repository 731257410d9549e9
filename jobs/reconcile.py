"""Reconciliation: per item, the database (quantity, sold, pending, paid) against Redis (units
left, holds, outbox per shard) and Kafka (the writer's lag).

Per item, in a quiet moment, these hold:
- Redis: units left + holds = quantity (no unit leaked or invented);
- every hold is an active order in the database, or still in flight (outbox or Kafka lag);
- every active order in the database has its hold in Redis (else a failover lost it and the
  unit could be sold twice: the database guard would refuse it, but the stock is wrong);
- ``sold`` = pending + paid.
Anything else is drift. Holds of orders the database has already ended are *stale*: releasing
them is always safe (release is idempotent), so ``--fix`` does it at any time; rebuilding a
shard from the database happens only while the item is paused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import asyncpg
from confluent_kafka import Consumer, TopicPartition

from domain.arm import arm_item
from domain.order_lifecycle import Ended, release_units
from kernel.settings import Settings
from shard_router import ShardRouter


@dataclass
class ItemReport:
    item_id: int
    quantity: int
    sold: int
    pending: int
    paid: int
    paused: bool
    units_left: int = 0
    holds: int = 0
    outbox: int = 0
    in_flight: int = 0
    stale: list[Ended] = field(default_factory=list)
    ghosts: int = 0  # holds with no order anywhere and nothing in flight
    lost: int = 0  # active orders whose hold Redis no longer has
    kafka_lag: int = 0

    @property
    def unit_drift(self) -> int:
        return self.quantity - (self.units_left + self.holds)

    @property
    def drift(self) -> int:
        """Disagreements beyond what is in flight; 0 means Redis and the database agree."""
        sold_drift = abs(self.sold - (self.pending + self.paid))
        return abs(self.unit_drift) + len(self.stale) + self.ghosts + self.lost + sold_drift


def writer_lag(cfg: Settings, topic_name: str | None = None, group: str | None = None) -> int:
    """Messages on the orders topic (or this one) that the writer group (or this one) has not
    committed yet."""
    topic_name = topic_name or cfg.orders_topic
    consumer = Consumer(
        {
            "bootstrap.servers": cfg.kafka_bootstrap,
            "group.id": group or cfg.writer_group,
            "enable.auto.commit": False,
        }
    )
    try:
        topic = consumer.list_topics(topic_name, timeout=5).topics[topic_name]
        partitions = [TopicPartition(topic_name, p) for p in topic.partitions]
        committed = consumer.committed(partitions, timeout=5)
        lag = 0
        for tp in committed:
            low, high = consumer.get_watermark_offsets(tp, timeout=5)
            lag += high - (tp.offset if tp.offset >= 0 else low)
        return lag
    finally:
        consumer.close()


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
    holds: dict[str, tuple[int, int]] = {}
    outboxed: set[str] = set()
    for state in await router.shard_states(item_id, shards):
        report.units_left += state.stock
        report.outbox += state.outbox
        for order_id, user_id in (await router.holds(item_id, state.shard)).items():
            holds[order_id] = (user_id, state.shard)
        outboxed.update((await router.outbox(item_id, state.shard)).keys())
    report.holds = len(holds)
    statuses = {
        str(r["id"]): r["status"]
        for r in await pool.fetch(
            "select id, status from flash_sale_order where item_id = $1", item_id
        )
    }
    active = {o for o, s in statuses.items() if s in ("PENDING", "PAID")}
    for order_id, (user_id, shard) in holds.items():
        status = statuses.get(order_id)
        if status in ("PENDING", "PAID"):
            continue
        if status is not None:
            report.stale.append(Ended(order_id, item_id, shards, shard, user_id))
        elif order_id in outboxed or kafka_lag > 0:
            report.in_flight += 1
        else:
            report.ghosts += 1
    report.lost = len(active - holds.keys())
    return report


async def reconcile(
    cfg: Settings,
    pool: asyncpg.Pool,
    router: ShardRouter,
    item_ids: list[int] | None = None,
    *,
    fix: bool = False,
) -> list[ItemReport]:
    if item_ids is None:
        item_ids = [
            r["id"]
            for r in await pool.fetch(
                "select i.id from flash_sale_item i join flash_sale s on s.id = i.sale_id"
                " where s.armed_at is not null order by i.id"
            )
        ]
    lag = writer_lag(cfg)
    reports = [await reconcile_item(pool, router, i, lag) for i in item_ids]
    if fix:
        for report in reports:
            if report.stale:
                await release_units(router, report.stale)
            if report.paused and (report.unit_drift or report.lost or report.ghosts):
                await arm_item(pool, router, report.item_id)
        reports = [await reconcile_item(pool, router, i, lag) for i in item_ids]
    return reports


def render_table(reports: list[ItemReport]) -> str:
    header = (
        f"{'item':>8} {'qty':>7} {'sold':>7} {'pending':>7} {'paid':>7} {'left':>7} "
        f"{'holds':>7} {'outbox':>6} {'flight':>6} {'stale':>5} {'ghost':>5} "
        f"{'lost':>5} {'lag':>6} {'drift':>5}"
    )
    lines = [header, "-" * len(header)]
    for r in reports:
        lines.append(
            f"{r.item_id:>8} {r.quantity:>7} {r.sold:>7} {r.pending:>7} {r.paid:>7} "
            f"{r.units_left:>7} {r.holds:>7} {r.outbox:>6} {r.in_flight:>6} "
            f"{len(r.stale):>5} {r.ghosts:>5} {r.lost:>5} {r.kafka_lag:>6} "
            f"{r.drift:>5}"
        )
    return "\n".join(lines)
