"""The reconciliation's Prometheus registry and its counter of repairs, bumped where each repair
happens (jobs/reconcile.py, jobs/voucher_reconcile.py); the gauges of its findings are in
jobs/reconcile_metrics.py, which serves them all."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

REGISTRY = CollectorRegistry()

REPAIRS = Counter(
    "flashsale_reconcile_repairs_total",
    "Repairs done, by kind (released_hold, forfeited_hold, delivered_outbox_entry, rebuilt_item)",
    ["repair"],
    registry=REGISTRY,
)


def repaired(kind: str, count: int) -> None:
    if count:
        REPAIRS.labels(kind).inc(count)
