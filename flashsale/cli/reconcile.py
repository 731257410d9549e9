"""``flashsale reconcile``: Redis against PostgreSQL and Kafka's lag, per item and voucher;
exit status 1 on drift, for cron jobs and pipelines (``--json`` for their parsers).

``--fix`` repairs what jobs/reconcile.py may repair (releases stale holds, delivers stuck outbox
entries; rebuilds paused items). Drift on something on sale now is asked about first: the repair
runs while buyers buy. ``--every SECONDS`` runs rounds until interrupted (jobs/reconcile_loop.py):
each repairs what is safe on sale without asking, logs a line, and /metrics shows the findings.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from domain.rules import RowId
from domain.vouchers import Code
from flashsale.cli import output, queries, views
from flashsale.cli.confirm import confirm
from flashsale.cli.connect import run_stack
from flashsale.cli.errors import Declined, Failure, UsageError
from flashsale.cli.parser import Subcommands, add_dry_run, add_json, add_yes, command, integer
from flashsale.cli.validate import convert
from kernel.settings import Settings

if TYPE_CHECKING:
    from jobs.reconcile import ItemReport
    from jobs.voucher_reconcile import VoucherReport


@dataclass(frozen=True)
class Selection:
    """What --item and --voucher ask for; neither given: every item and voucher (jobs/)."""

    items: list[int]
    codes: list[str]

    @property
    def items_or_all(self) -> list[int] | None:
        """The items to check: these, every one (None), or none ([]) when only codes are."""
        return self.items or (None if not self.codes else [])

    @property
    def codes_or_all(self) -> list[str] | None:
        return self.codes or (None if not self.items else [])

    @classmethod
    def of(cls, args: argparse.Namespace) -> Selection:
        return cls(
            [int(convert(i, RowId, {"$": "--item"})) for i in args.item or []],
            [str(convert(c, Code, {"$": "--voucher"})) for c in args.voucher or []],
        )


async def _check(
    cfg: Settings, pool: Any, router: Any, chosen: Selection, fix: bool
) -> tuple[list[ItemReport], list[VoucherReport]]:
    from jobs.reconcile import reconcile
    from jobs.voucher_reconcile import reconcile_vouchers
    from shard_router import VoucherStore

    try:
        items = await reconcile(cfg, pool, router, chosen.items_or_all, fix=fix)
        store = VoucherStore(router)
        vouchers = await reconcile_vouchers(cfg, pool, store, chosen.codes_or_all, fix=fix)
    except LookupError as exc:  # an --item or --voucher that does not exist
        raise Failure(str(exc)) from None
    return items, vouchers


async def _ask_about_live_drift(
    pool: Any, items: list[ItemReport], vouchers: list[VoucherReport], yes: bool
) -> None:
    on_sale = await queries.items_on_sale(pool, [r.item_id for r in items if r.drift])
    live = await queries.live_flash_vouchers(pool, [r.code for r in vouchers if r.drift])
    if not on_sale and not live:
        return
    touched = [
        f"item {r.item_id} ({len(r.stale)} stale holds, drift {r.drift})"
        for r in items
        if r.item_id in on_sale
    ]
    touched += [
        f"voucher {r.code} ({len(r.stale)} stale holds, drift {r.drift})"
        for r in vouchers
        if r.code in live
    ]
    confirm(
        f"reconcile --fix changes Redis for what is on sale now: {', '.join(touched)}; it "
        "releases the holds of orders and uses that have ended, while buyers are buying",
        yes=yes,
    )


def _report(
    items: list[ItemReport], vouchers: list[VoucherReport], fixed: bool, as_json: bool
) -> int:
    from jobs.reconcile import render_table
    from jobs.voucher_reconcile import render_voucher_table

    drift = sum(r.drift for r in items) + sum(r.drift for r in vouchers)
    if as_json:
        output.print_json(
            views.Reconciliation(
                drift,
                fixed,
                [views.check(r) for r in items],
                [views.check(r) for r in vouchers],
            )
        )
    else:
        if items:
            print(render_table(items))
        if vouchers:
            print(render_voucher_table(vouchers))
        print(f"drift: {drift}" + (" (after --fix)" if fixed else ""))
    return 1 if drift else 0


def _every(seconds: float, chosen: Selection, cfg: Settings) -> int:
    import asyncio
    import signal

    from jobs.reconcile_loop import Scope, run_reconcile
    from kernel import logs

    logs.setup(cfg)  # a long-running job: its lines in the one format, like the writer's
    port = None if cfg.reconcile_metrics_port < 0 else cfg.reconcile_metrics_port

    async def work(pool: Any, router: Any) -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        scope = Scope(chosen.items_or_all, chosen.codes_or_all)
        await run_reconcile(cfg, pool, router, seconds, stop, scope, metrics_port=port)
        return 0

    return run_stack(cfg, work)


def _reconcile(args: argparse.Namespace, cfg: Settings) -> int:
    chosen = Selection.of(args)
    if args.dry_run and not args.fix:
        raise UsageError("--dry-run: only with --fix (without it nothing is changed anyway)")
    if args.every is not None:
        for flag, given in (("--fix", args.fix), ("--json", args.json)):
            if given:
                raise UsageError(
                    f"--every: not with {flag} (each round repairs what is safe on sale and "
                    "logs a line; pause an item and run --fix once for the rest)"
                )
        return _every(args.every, chosen, cfg)

    async def work(pool: Any, router: Any) -> int:
        items, vouchers = await _check(cfg, pool, router, chosen, fix=False)
        drifted = any(r.drift for r in items) or any(r.drift for r in vouchers)
        if not (args.fix and drifted):
            return _report(items, vouchers, False, args.json)
        if args.dry_run:
            output.note(_would_fix(items, vouchers))
            return _report(items, vouchers, False, args.json)
        try:
            await _ask_about_live_drift(pool, items, vouchers, args.yes)
        except Declined:
            _report(items, vouchers, False, args.json)
            raise
        items, vouchers = await _check(cfg, pool, router, chosen, fix=True)
        return _report(items, vouchers, True, args.json)

    return run_stack(cfg, work)


def _would_fix(items: list[ItemReport], vouchers: list[VoucherReport]) -> str:
    reports: list[ItemReport | VoucherReport] = [*items, *vouchers]
    stale = sum(len(r.stale) for r in reports)
    stuck = sum(len(r.stuck) for r in reports)
    rebuilt = [str(r.item_id) for r in items if r.paused and r.drift]
    return (
        f"dry run: --fix would release {stale} stale hold(s), deliver {stuck} stuck outbox "
        f"entr{'y' if stuck == 1 else 'ies'}"
        + (f" and rebuild paused item(s) {', '.join(rebuilt)}" if rebuilt else "")
        + "; nothing was changed"
    )


def add_reconcile(sub: Subcommands) -> None:
    p = command(
        sub,
        "reconcile",
        "compare Redis with the database (and Kafka's lag); exit status 1 on drift",
        _reconcile,
    )
    p.add_argument(
        "--item",
        type=integer,
        action="append",
        metavar="ITEM_ID",
        help="only this item; repeat for more (default: every item of an armed sale that ended "
        "less than a day ago or is yet to end, and the vouchers unless --voucher is given too)",
    )
    p.add_argument(
        "--voucher",
        action="append",
        metavar="CODE",
        help="only this voucher; repeat for more (default: every voucher live in the last "
        "day, and the items unless --item is given too)",
    )
    p.add_argument(
        "--fix",
        action="store_true",
        help="release stale holds, deliver stuck outbox entries; rebuild the shards of paused "
        "items from the database (default: only report)",
    )
    p.add_argument(
        "--every",
        type=_seconds,
        metavar="SECONDS",
        help="run until interrupted: a round every SECONDS that repairs what is safe on sale "
        "(stale holds, stuck outbox entries) and logs a line; /metrics on "
        "FLASHSALE_RECONCILE_METRICS_PORT (default: one report, then exit)",
    )
    add_yes(p, "--fix drift on items and vouchers on sale now")
    add_dry_run(p, "what --fix would repair (the report, and a line on stderr)")
    add_json(p)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not value >= 0.1:  # also refuses nan
        raise argparse.ArgumentTypeError("must be at least 0.1")
    return value
