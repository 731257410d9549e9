"""Reconciliation of vouchers: the database (total_limit, used_count, reserved, confirmed)
against Redis (uses left, holds, outbox) and Kafka (the voucher writer's lag).

Per voucher, in a quiet moment, these hold:
- ``used_count`` = reserved + confirmed (every voucher);
- flash: Redis uses left + holds = total_limit (no use leaked or invented);
- flash: every hold is an active redemption in the database, or still in flight (outbox or
  Kafka lag), else it is a *ghost*; a hold whose redemption has ended is *stale*;
- flash: every active redemption has its hold in Redis, else it was *lost* (a failover).
Anything else is drift. Releasing stale holds is always safe (release is idempotent), so
``--fix`` does it; a ghost or a lost hold needs ``flashsale voucher arm`` in a quiet moment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import asyncpg

from domain.voucher_lifecycle import ACTIVE, EndedUse, release_uses
from jobs.reconcile import writer_lag
from kernel.settings import Settings
from shard_router.vouchers import VoucherStore


@dataclass
class VoucherReport:
    code: str
    is_flash: bool
    total_limit: int
    used_count: int
    reserved: int
    confirmed: int
    remaining: int | None = None  # flash only; None when Redis has not loaded it
    holds: int = 0
    outbox: int = 0
    in_flight: int = 0
    stale: list[EndedUse] = field(default_factory=list)
    ghosts: int = 0
    lost: int = 0
    kafka_lag: int = 0

    @property
    def use_drift(self) -> int:
        if not self.is_flash:
            return 0
        return self.total_limit - ((self.remaining or 0) + self.holds)

    @property
    def drift(self) -> int:
        count_drift = abs(self.used_count - (self.reserved + self.confirmed))
        return abs(self.use_drift) + len(self.stale) + self.ghosts + self.lost + count_drift


async def reconcile_voucher(
    pool: asyncpg.Pool, store: VoucherStore, code: str, kafka_lag: int
) -> VoucherReport:
    voucher = await pool.fetchrow(
        "select total_limit, used_count, is_flash from voucher where code = $1", code
    )
    if voucher is None:
        raise LookupError(f"voucher {code} does not exist")
    statuses: dict[str, tuple[str, int]] = {
        r["order_id"]: (r["status"], r["customer_id"])
        for r in await pool.fetch(
            "select order_id, status, customer_id from voucher_redemption where voucher_code = $1",
            code,
        )
    }
    counts = [s for s, _ in statuses.values()]
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
    holds = await store.holds(code)
    outboxed = (await store.outbox(code)).keys()
    report.holds = len(holds)
    for order_id, customer_id in holds.items():
        status = statuses.get(order_id)
        if status is not None and status[0] in ACTIVE:
            continue
        if status is not None:
            report.stale.append(EndedUse(code, order_id, customer_id, True))
        elif order_id in outboxed or kafka_lag > 0:
            report.in_flight += 1
        else:
            report.ghosts += 1
    active = {o for o, (s, _) in statuses.items() if s in ACTIVE}
    report.lost = len(active - holds.keys())
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
    reports = [await reconcile_voucher(pool, store, code, lag) for code in codes]
    if fix and any(r.stale for r in reports):
        for report in reports:
            await release_uses(store, report.stale)
        reports = [await reconcile_voucher(pool, store, code, lag) for code in codes]
    return reports


def render_voucher_table(reports: list[VoucherReport]) -> str:
    header = (
        f"{'voucher':<20} {'kind':<8} {'limit':>7} {'used':>7} {'reserved':>8} {'confirmed':>9} "
        f"{'left':>7} {'holds':>7} {'outbox':>6} {'flight':>6} {'stale':>5} {'ghost':>5} "
        f"{'lost':>5} {'lag':>6} {'drift':>5}"
    )
    lines = [header, "-" * len(header)]
    for r in reports:
        left = "-" if r.remaining is None else str(r.remaining)
        lines.append(
            f"{r.code[:20]:<20} {'flash' if r.is_flash else 'ordinary':<8} {r.total_limit:>7} "
            f"{r.used_count:>7} {r.reserved:>8} {r.confirmed:>9} {left:>7} {r.holds:>7} "
            f"{r.outbox:>6} {r.in_flight:>6} {len(r.stale):>5} {r.ghosts:>5} {r.lost:>5} "
            f"{r.kafka_lag:>6} {r.drift:>5}"
        )
    return "\n".join(lines)
