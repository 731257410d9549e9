"""Reconciliation of vouchers (jobs/audit.py): the database (total_limit, used_count, reserved,
confirmed) against Redis (uses left, holds, outbox) and Kafka (the voucher writer's lag).

Per voucher, in a quiet moment, these hold:
- ``used_count`` = reserved + confirmed (every voucher);
- flash: Redis uses left + holds = total_limit (no use leaked or invented);
- flash: every hold is an active redemption in the database, or still in flight (outbox or
  Kafka lag), else it is a *ghost*; a hold whose redemption has ended is *stale*;
- flash: every active redemption has its hold in Redis, else it was *lost* (a failover);
- flash: no outbox entry outlives its voucher by more than a hold window.
Anything else is drift. ``fix`` releases stale holds and delivers stuck outbox entries (both
safe while customers reserve); a ghost or a lost hold needs ``flashsale voucher arm``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import asyncpg

from domain.give_back import give_back
from domain.voucher_arm import OUT_OF_STOCK
from domain.voucher_lifecycle import ACTIVE, EndedUse
from jobs.audit import AUDIT_COLUMNS, HoldAudit, Reconciliation, Stuck, add_dead_lettered
from jobs.outbox_delivery import deliver
from jobs.repairs import repaired
from jobs.table import render
from jobs.writer_lag import writer_lag
from kernel.events import VoucherReserved
from kernel.settings import Settings, settings
from shard_router.reassert import forfeit_use
from shard_router.vouchers import VoucherStore


@dataclass
class VoucherReport(HoldAudit[EndedUse, str]):
    code: str
    is_flash: bool
    total_limit: int
    used_count: int
    reserved: int
    confirmed: int
    remaining: int | None = None  # flash only; None when Redis has not loaded it

    @property
    def use_drift(self) -> int:
        if not self.is_flash:
            return 0
        return self.total_limit - ((self.remaining or 0) + self.holds)

    @property
    def drift(self) -> int:
        count_drift = self.used_count - (self.reserved + self.confirmed)
        return abs(self.use_drift) + self.hold_drift + abs(count_drift)


async def reconcile_voucher(
    pool: asyncpg.Pool, store: VoucherStore, code: str, kafka_lag: int, hold_s: int | None = None
) -> VoucherReport:
    """``hold_s``: how long a reservation may be held (default: the settings'); an outbox entry
    of a voucher that ended longer ago than that is stuck."""
    if hold_s is None:
        hold_s = settings().voucher_hold_seconds
    voucher = await pool.fetchrow(
        "select total_limit, used_count, is_flash,"
        " now() > ends_at + make_interval(secs => $2) as relay_done from voucher where code = $1",
        code,
        hold_s,
    )
    if voucher is None:
        raise LookupError(f"voucher {code} does not exist")
    rows = await pool.fetch(
        "select order_id, status, failure_reason from voucher_redemption where voucher_code = $1",
        code,
    )
    statuses: dict[str, str] = {r["order_id"]: r["status"] for r in rows}
    refused = {r["order_id"] for r in rows if (r["failure_reason"] or "").startswith(OUT_OF_STOCK)}
    counts = list(statuses.values())
    report = VoucherReport(
        code,
        voucher["is_flash"],
        voucher["total_limit"],
        voucher["used_count"],
        counts.count("RESERVED"),
        counts.count("CONFIRMED"),
        failed=counts.count("FAILED"),
    )
    if not report.is_flash:
        return report
    report.kafka_lag = kafka_lag
    state = await store.state(code)
    report.remaining, report.outbox = state.remaining, state.outbox
    holds = {o: EndedUse(code, o, c, True) for o, c in (await store.holds(code)).items()}
    entries = await store.outbox(code) if state.outbox else {}
    if voucher["relay_done"]:  # no gateway relays this voucher's outbox any more
        report.stuck = [Stuck(code, o, payload) for o, payload in entries.items()]
        entries = {}
    await add_dead_lettered(pool, "vouchers", holds, statuses)
    report.audit_holds(holds, statuses, ACTIVE, entries.keys(), refused)
    return report


async def repair_voucher(cfg: Settings, store: VoucherStore, report: VoucherReport) -> bool:
    """Deliver its stuck outbox entries, release its stale holds (forfeit those refused for the
    voucher's limit); whether anything was done."""
    delivered = await deliver(
        cfg, cfg.vouchers_topic, VoucherReserved, report.stuck, store.ack_outbox
    )
    repaired("delivered_outbox_entry", delivered)
    released = await give_back(
        [use for use in report.stale if use.order_id not in report.forfeit],
        lambda use: store.release(use.code, use.order_id),
    )
    repaired("released_hold", len(released))
    forfeited = await give_back(
        [use for use in report.stale if use.order_id in report.forfeit],
        lambda use: forfeit_use(store.router, use.code, use.order_id),
    )
    repaired("forfeited_hold", len(forfeited))
    return bool(delivered or report.stale)


_RECENT = "select code from voucher where ends_at > now() - interval '1 day' order by code"


def _lag(cfg: Settings) -> int:
    return writer_lag(cfg, cfg.vouchers_topic, cfg.voucher_writer_group)


# Every voucher live in the last day (or these codes); ``fix`` repairs what is safe live (a
# voucher has nothing to rebuild: a ghost or a lost hold needs `flashsale voucher arm`).
reconcile_vouchers: Final[Reconciliation[str, VoucherReport, VoucherStore]] = Reconciliation(
    recent=_RECENT,
    lag=_lag,
    check=lambda cfg, pool, store, code, lag: reconcile_voucher(
        pool, store, code, lag, hold_s=cfg.voucher_hold_seconds
    ),
    repair=lambda cfg, pool, store, report, rebuild: repair_voucher(cfg, store, report),
)


_COLUMNS = f"voucher:<20 kind:<8 limit:>7 used:>7 reserved:>8 confirmed:>9 left:>7 {AUDIT_COLUMNS}"


def render_voucher_table(reports: list[VoucherReport]) -> str:
    return render(
        _COLUMNS,
        (
            (
                r.code[:20],
                "flash" if r.is_flash else "ordinary",
                r.total_limit,
                r.used_count,
                r.reserved,
                r.confirmed,
                "-" if r.remaining is None else str(r.remaining),
                *r.audit_cells(),
            )
            for r in reports
        ),
    )
