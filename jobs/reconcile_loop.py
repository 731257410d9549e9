"""Reconciliation that runs on its own: a round every interval, each one checking the items and
flash vouchers, repairing what is safe while buyers buy (the sweep: stale holds released, stuck
outbox entries delivered), and exporting the findings as metrics. A release that failed after
its order ended is thereby retried every round until it goes. What needs the item paused (a lost
hold, units that do not add up) is only reported: an operator pauses it and runs --fix."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import asyncpg

from jobs import reconcile_metrics as metrics
from jobs.reconcile import ItemReport, reconcile
from jobs.voucher_reconcile import VoucherReport, reconcile_vouchers
from kernel.periodic import run_every, stopped_by_signals
from kernel.settings import Settings
from shard_router import ShardRouter, VoucherStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Scope:
    """What a round looks at: these items and codes; None is every recent one, [] none."""

    items: list[int] | None = None
    codes: list[str] | None = None


@dataclass(frozen=True, slots=True)
class Round:
    items: list[ItemReport] = field(default_factory=list)
    vouchers: list[VoucherReport] = field(default_factory=list)

    @property
    def drift(self) -> int:
        return sum(r.drift for r in self.items) + sum(r.drift for r in self.vouchers)

    def drifted(self) -> list[str]:
        return [f"item {r.item_id}" for r in self.items if r.drift] + [
            f"voucher {r.code}" for r in self.vouchers if r.drift
        ]


async def reconcile_round(
    cfg: Settings, pool: asyncpg.Pool, router: ShardRouter, scope: Scope
) -> Round:
    """One round: check, repair what is safe on sale, check again what was repaired, export."""
    items = await reconcile(cfg, pool, router, scope.items, fix=True, rebuild=False)
    store = VoucherStore(router)
    vouchers = await reconcile_vouchers(cfg, pool, store, scope.codes, fix=True)
    # An ordinary voucher has no holds to graph, and there may be millions of them.
    metrics.export([*items, *(v for v in vouchers if v.is_flash)])
    return Round(items, vouchers)


async def run_reconcile(
    cfg: Settings,
    pool: asyncpg.Pool,
    router: ShardRouter,
    interval_s: float,
    stop: asyncio.Event,
    scope: Scope | None = None,
    *,
    metrics_port: int | None = None,
) -> None:
    """Rounds every ``interval_s`` until ``stop`` is set, or SIGTERM or SIGINT arrives (the round
    under way finishes first); /metrics on ``metrics_port`` (0: a free one, None: none)
    meanwhile. A failed round is counted and logged, and the next one runs."""
    server = None if metrics_port is None else metrics.serve(metrics_port, cfg.metrics_host)

    async def step() -> None:
        try:
            done = await reconcile_round(cfg, pool, router, scope or Scope())
        except Exception:
            metrics.ROUNDS.labels("failed").inc()
            raise
        metrics.ROUNDS.labels("ok").inc()
        checked = f"checked {len(done.items)} item(s), {len(done.vouchers)} voucher(s)"
        if done.drift:
            # What is left needs an operator: the safe repairs ran already.
            log.warning("%s: drift %d in %s", checked, done.drift, ", ".join(done.drifted()))
        else:
            log.info("%s: no drift", checked)

    try:
        with stopped_by_signals(stop):
            await run_every(interval_s, step, stop, "reconcile round")
        log.info("reconciliation stopped between rounds")
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
