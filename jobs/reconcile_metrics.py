"""Prometheus metrics of the reconciliation (jobs/reconcile_loop.py serves them): each round's
findings per item (``item`` label) and flash voucher (``voucher`` label; the other label is
empty, which Prometheus reads as absent), and the rounds; the repairs are counted in
jobs/repairs.py."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import Counter, Gauge, start_http_server

from jobs.reconcile import ItemReport
from jobs.repairs import REGISTRY
from jobs.voucher_reconcile import VoucherReport

log = logging.getLogger(__name__)

Report = ItemReport | VoucherReport


def _units_left(report: Report) -> float:
    if isinstance(report, ItemReport):
        return report.units_left
    return float("nan") if report.remaining is None else report.remaining


# name → (help, the value of a report): one gauge each, per item and per voucher.
_FINDINGS: dict[str, tuple[str, Callable[[Report], float]]] = {
    "drift_units": ("Disagreements beyond what is in flight (0: agree)", lambda r: r.drift),
    "lost_units": ("Active orders whose hold Redis no longer has", lambda r: r.lost),
    "stale_holds": ("Holds of orders that have ended (released live)", lambda r: len(r.stale)),
    "ghost_holds": ("Holds with no order anywhere and nothing in flight", lambda r: r.ghosts),
    "stuck_outbox_entries": ("Outbox entries no relay sends any more", lambda r: len(r.stuck)),
    "in_flight_holds": ("Holds accepted and not stored yet", lambda r: r.in_flight),
    "units_left": ("Units (uses) left in Redis", _units_left),
    "holds": ("Hold records in Redis", lambda r: r.holds),
    "failed_orders": ("Orders (uses) the writer refused", lambda r: r.failed),
}
GAUGES = {
    name: Gauge(f"flashsale_reconcile_{name}", text, ["item", "voucher"], registry=REGISTRY)
    for name, (text, _) in _FINDINGS.items()
}
ROUNDS = Counter(
    "flashsale_reconcile_rounds_total",
    "Reconciliation rounds, by outcome (ok, failed)",
    ["outcome"],
    registry=REGISTRY,
)
LAST_ROUND = Gauge(
    "flashsale_reconcile_last_round_timestamp_seconds",
    "When the last round that succeeded ended (Unix time)",
    registry=REGISTRY,
)

_exported: set[tuple[str, str]] = set()  # the label pairs the gauges have now


def _labels(report: Report) -> tuple[str, str]:
    if isinstance(report, ItemReport):
        return str(report.item_id), ""
    return "", report.code


def export(reports: Iterable[Report]) -> None:
    """Set every gauge from this round's reports; drop the series of those no longer checked."""
    seen: set[tuple[str, str]] = set()
    for report in reports:
        labels = _labels(report)
        seen.add(labels)
        for name, (_, value) in _FINDINGS.items():
            GAUGES[name].labels(*labels).set(value(report))
    for labels in _exported - seen:
        for gauge in GAUGES.values():
            gauge.remove(*labels)
    _exported.clear()
    _exported.update(seen)
    LAST_ROUND.set_to_current_time()


def serve(port: int, host: str = "127.0.0.1") -> WSGIServer:
    """Serve /metrics on ``port`` (0 picks a free one) from a daemon thread until shut down."""
    server, _thread = start_http_server(port, addr=host, registry=REGISTRY)
    log.info("reconcile metrics on :%d/metrics", server.server_port)
    return server
