"""Reconciliation of vouchers (jobs/audit.py): the database (total_limit, used_count, reserved,
confirmed) against Redis (uses left, holds, outbox) and Kafka (the voucher writer's lag).

Per voucher, in a quiet moment, these hold:
- ``used_count`` = reserved + confirmed (every voucher);
- flash: Redis uses left + holds = total_limit (no use leaked or invented);
- flash: every hold is an active redemption in the database, or still in flight (outbox or
  Kafka lag), else it is a *ghost*; a hold whose redemption has ended is *stale*;
- flash: every active redemption has its hold in Redis, else it was *lost* (a failover).
Anything else is drift. ``--fix`` releases stale holds; a ghost or a lost hold needs
``flashsale voucher arm`` in a quiet moment.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from domain.voucher_lifecycle import ACTIVE, EndedUse, release_uses
from jobs.audit import AUDIT_COLUMNS, HoldAudit, reconcile_each
from jobs.table import render
from jobs.writer_lag import writer_lag
from kernel.settings import Settings
from shard_router.vouchers import VoucherStore


@dataclass
class VoucherReport(HoldAudit[EndedUse]):
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
    pool: asyncpg.Pool, store: VoucherStore, code: str, kafka_lag: int
) -> VoucherReport:
    voucher = await pool.fetchrow(
        "select total_limit, used_count, is_flash from voucher where code = $1", code
    )
    if voucher is None:
        raise LookupError(f"voucher {code} does not exist")
    statuses: dict[str, str] = {
        r["order_id"]: r["status"]
        for r in await pool.fetch(
            "select order_id, status from voucher_redemption where voucher_code = $1", code
        )
    }
    counts = list(statuses.values())
    report = VoucherReport(
        code,
        voucher["is_flash"],
        voucher["total_limit"],
        voucher["used_count"],
        counts.count("RESERVED"),
        counts.count("CONFIRMED"),
    )
    if not report.is_flash:
        return report
    report.kafka_lag = kafka_lag
    state = await store.state(code)
    report.remaining, report.outbox = state.remaining, state.outbox
    holds = {o: EndedUse(code, o, c, True) for o, c in (await store.holds(code)).items()}
    outboxed = (await store.outbox(code)).keys()
    report.audit_holds(holds, statuses, ACTIVE, outboxed)
    return report


async def reconcile_vouchers(
    cfg: Settings,
    pool: asyncpg.Pool,
    store: VoucherStore,
    codes: list[str] | None = None,
    *,
    fix: bool = False,
) -> list[VoucherReport]:
    """Every voucher live in the last day (or these codes); ``fix`` releases stale holds."""
    if codes is None:
        codes = [
            r["code"]
            for r in await pool.fetch(
                "select code from voucher where ends_at > now() - interval '1 day' order by code"
            )
        ]
    lag = writer_lag(cfg, cfg.vouchers_topic, cfg.voucher_writer_group)

    async def check(code: str) -> VoucherReport:
        return await reconcile_voucher(pool, store, code, lag)

    async def repair(report: VoucherReport) -> bool:
        await release_uses(store, report.stale)
        return bool(report.stale)

    return await reconcile_each(codes, check, repair if fix else None)


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
