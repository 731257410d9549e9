"""What a run got, counted where Locust counts: answers per kind come from Locust's own stats
(aggregated from the workers by the master); the orderIds of the 202s are this module's addition.
Workers hand theirs to the master inside every stats report (``report_to_master`` /
``worker_report``), so the master, or a standalone process, holds them all when Locust quits.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

REPORT_KEY = "flashsale_accepted"
PURCHASE_CODES = (202, 409, 410, 429, 503)


class Accepted:
    """orderIds answered 202: all of them here (master or standalone), and the ones a worker has
    not reported yet."""

    def __init__(self) -> None:
        self.order_ids: set[str] = set()
        self._unreported: list[str] = []

    def add(self, order_id: str) -> None:
        self.order_ids.add(order_id)
        self._unreported.append(order_id)

    def clear(self) -> None:
        self.order_ids.clear()
        self._unreported.clear()

    def on_report_to_master(self, client_id: str, data: dict[str, Any], **_: Any) -> None:
        data[REPORT_KEY], self._unreported = self._unreported, []

    def on_worker_report(self, client_id: str, data: dict[str, Any], **_: Any) -> None:
        self.order_ids.update(data.get(REPORT_KEY, ()))


ACCEPTED = Accepted()


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    requests: int
    failures: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float

    @property
    def endpoint(self) -> str:
        return self.name.split(" ", 1)[0]

    @property
    def status(self) -> int | None:
        parts = self.name.split(" ")
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def _row(name: str, entry: Any) -> Row:
    def pct(q: float) -> float:
        return float(entry.get_response_time_percentile(q) or 0) if entry.num_requests else 0.0

    return Row(
        name,
        int(entry.num_requests),
        int(entry.num_failures),
        pct(0.50),
        pct(0.95),
        pct(0.99),
        float(entry.max_response_time or 0),
    )


def rows(stats: Any) -> list[Row]:
    """One row per answer kind, sorted by name, and the total last."""
    found = [_row(name, entry) for (name, _method), entry in stats.entries.items()]
    return sorted(found, key=lambda r: r.name) + [_row("total", stats.total)]


def status_counts(table: list[Row], endpoint: str = "purchase") -> dict[str, int]:
    counts = {str(code): 0 for code in PURCHASE_CODES} | {"other": 0}
    for row in table:
        if row.endpoint != endpoint:
            continue
        key = str(row.status) if row.status in PURCHASE_CODES else "other"
        counts[key] += row.requests
    return counts


def summary(stats: Any) -> str:
    table = rows(stats)
    lines = [
        "flash-sale answers",
        f"  {'answer':<44} {'count':>8} {'failed':>7} {'p50':>7} {'p95':>7} {'p99':>7} "
        f"{'max':>7}  (ms)",
    ]
    for r in table:
        lines.append(
            f"  {r.name:<44} {r.requests:>8} {r.failures:>7} {r.p50_ms:>7.0f} {r.p95_ms:>7.0f} "
            f"{r.p99_ms:>7.0f} {r.max_ms:>7.0f}"
        )
    counts = "  ".join(f"{k}: {v}" for k, v in status_counts(table).items())
    lines.append(f"  purchase answers   {counts}")
    lines.append(f"  202 orderIds       {len(ACCEPTED.order_ids)} collected")
    for error in stats.errors.values():
        lines.append(f"  FAILED {error.occurrences:>6} x {error.name}: {error.error}")
    return "\n".join(lines)


def progress(stats: Any, users: int, elapsed_s: float, rate: float) -> str:
    table = [_row(name, entry) for (name, _m), entry in stats.entries.items()]
    counts = " ".join(f"{k}:{v}" for k, v in status_counts(table).items() if v or k != "other")
    total = stats.total
    p50 = total.get_current_response_time_percentile(0.5) or 0
    p99 = total.get_current_response_time_percentile(0.99) or 0
    return (
        f"PROGRESS {elapsed_s:5.1f}s users {users:>5}  answers {total.num_requests:>7} "
        f"({rate:6.0f}/s)  purchase {counts}  failed {total.num_failures}  "
        f"p50 {p50:.0f} p99 {p99:.0f} ms (last 10 s)"
    )


def write_outcome(path: Path, stats: Any, run: dict[str, Any] | None) -> None:
    """The run's target, answer counts and percentiles, failures, and every 202's orderId."""
    table = rows(stats)
    outcome = {
        "run": run,
        "answers": [asdict(r) for r in table],
        "purchase_counts": status_counts(table),
        "failures": [
            {"name": e.name, "error": str(e.error), "occurrences": e.occurrences}
            for e in stats.errors.values()
        ],
        "accepted": sorted(ACCEPTED.order_ids),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(outcome, indent=1))
    log.info("wrote %s (%d orderIds answered 202)", path, len(ACCEPTED.order_ids))
