"""What a post-sale report draws: a sale's timeline, from Prometheus's range queries over the
processes' raw series where Prometheus kept them, and from PostgreSQL's order timestamps always
(reserved: ``created_at``, the gateway's clock at the reservation; stored: ``updated_at``, the
writer's insert, for orders not paid or expired since)."""

from __future__ import annotations

import datetime as dt
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from flashsale.observe.prom import Prometheus, PrometheusUnavailable

Points = list[tuple[float, float]]  # (unix time, value)
PURCHASE_ROUTE = "/api/flash-sales/items/{item_id}/purchase"
MARGIN_S = 5.0  # before the first order and after the last
MAX_POINTS = 600  # per series: a step of a second for a ten-minute sale

ITEMS = "select id, quantity from flash_sale_item where sale_id = $1 order by id"
SALE = "select name, starts_at, ends_at from flash_sale where id = $1"
SPAN = """
select min(created_at) as first, max(greatest(created_at, updated_at)) as last
from flash_sale_order where item_id = any($1::bigint[])
"""
# Orders per tenth of a second: fine enough beside Prometheus's one-second steps, and at most
# ten points a second however large the sale.
PER_TENTH = """
select item_id, floor(extract(epoch from {column}) * 10)::float8 / 10 as t, count(*) as n
from flash_sale_order where item_id = any($1::bigint[]) {where}
group by 1, 2 order by 1, 2
"""
# The instant the last unit was first taken: the quantity-th order not refused, by reservation.
SOLD_OUT = """
select extract(epoch from created_at)::float8 from flash_sale_order
where item_id = $1 and status <> 'FAILED' order by created_at offset $2 - 1 limit 1
"""
STATUSES = """
select item_id, status, count(*) as n from flash_sale_order
where item_id = any($1::bigint[]) group by 1, 2
"""


@dataclass
class ItemLine:
    item_id: int
    quantity: int
    statuses: dict[str, int] = field(default_factory=dict)
    reserved_db: Points = field(default_factory=list)  # cumulative orders by created_at
    stored_db: Points = field(default_factory=list)  # cumulative, by the writer's insert
    sold_redis: Points = field(default_factory=list)  # quantity - units left in Redis
    sold_out_db: float | None = None
    sold_out_redis: float | None = None

    @property
    def sold_out_at(self) -> float | None:
        """The earlier of the two: each sees the same event, Prometheus at its next successful
        scrape of a gateway (late by up to a scrape, more when a busy gateway misses some), the
        database by the last unit's own reservation time."""
        seen = [at for at in (self.sold_out_redis, self.sold_out_db) if at is not None]
        return min(seen) if seen else None


@dataclass
class Timeline:
    sale_id: int
    name: str
    start: float
    end: float
    step: float
    items: list[ItemLine]
    source: str = "PostgreSQL only (Prometheus did not answer)"
    answers: dict[str, Points] = field(default_factory=dict)  # outcome -> per second
    answered: dict[str, float] = field(default_factory=dict)  # outcome -> over the window
    latency: dict[str, Points] = field(default_factory=dict)  # "reservation p99" -> seconds
    writer_lag: dict[str, Points] = field(default_factory=dict)  # topic -> messages


def _cumulative(rows: list[Any]) -> dict[int, Points]:
    found: dict[int, Points] = defaultdict(list)
    for row in rows:
        points = found[row["item_id"]]
        points.append((row["t"], (points[-1][1] if points else 0) + row["n"]))
    return found


def _window(span: Any, sale: Any) -> tuple[float, float]:
    now = time.time()
    if span["first"] is not None:
        return span["first"].timestamp() - MARGIN_S, min(now, span["last"].timestamp() + MARGIN_S)
    starts: dt.datetime = sale["starts_at"]
    ends: dt.datetime = sale["ends_at"]
    return starts.timestamp(), min(now, ends.timestamp())


async def from_database(pool: Any, sale_id: int, scrape_interval_s: float) -> Timeline:
    sale = await pool.fetchrow(SALE, sale_id)
    if sale is None:
        raise LookupError(f"sale {sale_id} does not exist")
    rows = await pool.fetch(ITEMS, sale_id)
    ids = [r["id"] for r in rows]
    start, end = _window(await pool.fetchrow(SPAN, ids), sale)
    step = max(float(scrape_interval_s), (end - start) / MAX_POINTS)
    reserved = _cumulative(await pool.fetch(PER_TENTH.format(column="created_at", where=""), ids))
    stored = _cumulative(
        await pool.fetch(
            PER_TENTH.format(column="updated_at", where="and status in ('PENDING', 'FAILED')"),
            ids,
        )
    )
    statuses: dict[int, dict[str, int]] = defaultdict(dict)
    for r in await pool.fetch(STATUSES, ids):
        statuses[r["item_id"]][r["status"]] = r["n"]
    items = []
    for r in rows:
        line = ItemLine(r["id"], r["quantity"], statuses[r["id"]])
        line.reserved_db, line.stored_db = reserved.get(r["id"], []), stored.get(r["id"], [])
        if r["quantity"] > 0:
            line.sold_out_db = await pool.fetchval(SOLD_OUT, r["id"], r["quantity"])
        items.append(line)
    return Timeline(sale_id, sale["name"], start, end, step, items)


def add_prometheus(timeline: Timeline, prom: Prometheus, scrape_interval_s: float) -> bool:
    """Fill in what Prometheus kept; False (and nothing changed) when it does not answer."""
    t = timeline
    # Rates over 3 scrapes: the spike's shape, not the recording rules' 10 s smoothing.
    w = f"{max(3 * scrape_interval_s, 2 * t.step):.0f}s"

    def series(expr: str, label: str) -> dict[str, Points]:
        return {m.get(label, ""): v for m, v in prom.query_range(expr, t.start, t.end, t.step)}

    span = (t.start, t.end, t.step)
    try:
        answers = series(
            f"sum by (outcome) (rate(flashsale_purchase_requests_total[{w}]))", "outcome"
        )
    except PrometheusUnavailable:
        return False
    t.source = f"Prometheus {prom.url} and PostgreSQL"
    t.answers = {o: p for o, p in answers.items() if any(v for _, v in p)}
    t.answered = answered(
        prom.query_range("flashsale_purchase_requests_total", *span), t.start + t.step
    )
    route = f'route="{PURCHASE_ROUTE}"'
    for q in (0.5, 0.99):
        name = f"p{q * 100:g}"
        for what, buckets in (
            ("reservation", "flashsale_reservation_seconds_bucket"),
            ("purchase request", f"flashsale_http_request_seconds_bucket{{{route}}}"),
        ):
            expr = f"histogram_quantile({q}, sum by (le) (rate({buckets}[{w}])))"
            found = series(expr, "")
            if found:
                t.latency[f"{what} {name}"] = next(iter(found.values()))
    t.writer_lag = series("sum by (topic) (flashsale_writer_consumer_lag)", "topic")
    items = "|".join(str(i.item_id) for i in t.items) or "none"
    left = series(
        f'sum by (item) (max by (item, shard) (flashsale_shard_stock{{item=~"{items}"}}))', "item"
    )
    for line in t.items:
        points = left.get(str(line.item_id), [])
        line.sold_redis = [(at, line.quantity - v) for at, v in points]
        line.sold_out_redis = next((at for at, v in points if v <= 0), None)
    return True


def answered(counters: list[tuple[dict[str, str], Points]], since: float) -> dict[str, float]:
    """Answers in the window by outcome, exactly, from each process's counter readings: what
    they rose by (a reset counts from zero), and all of it for a process that started inside the
    window, first read after ``since`` (it counted from zero before Prometheus first read it).
    increase() would extrapolate to the window's edges instead."""
    found: dict[str, float] = defaultdict(float)
    for labels, points in counters:
        if not points:
            continue
        rose = points[0][1] if points[0][0] > since else 0.0
        for (_, before), (_, after) in zip(points, points[1:], strict=False):
            rose += after - before if after >= before else after
        found[labels.get("outcome", "")] += rose
    return {outcome: n for outcome, n in found.items() if n > 0}
