"""``flashsale watch [--sale ID]``: a sale live in the terminal, redrawn every second: per item
and shard the stock left, holds and outbox (Redis) and the orders sold (PostgreSQL); answers per
second by outcome; p50/p99 of the reservation and of each route; the writers' lag;
reconciliation's findings; the alerts firing. Figures come from Prometheus
(FLASHSALE_PROMETHEUS_URL) when it answers, else from the processes' /metrics pages
(FLASHSALE_GATEWAY_TARGETS, _WRITER_TARGETS, _JOB_TARGETS): any deployment, given addresses.
``--json`` streams the same figures, one JSON object per line per refresh (docs/cli.md)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from flashsale.cli.parser import Subcommands, at_least, command, integer
from kernel.settings import Settings

R = TypeVar("R")


async def _on_daemon_thread(fn: Callable[[], R]) -> R:
    """``fn()`` on a thread of its own that the process does not wait for: a Ctrl-C
    mid-frame ends the watch at once. asyncio.to_thread's executor is joined at exit, so a
    frame's ten Prometheus queries against a starved Prometheus (2 s each) held a Ctrl-C for
    20 s and more."""
    import asyncio
    import contextlib
    import functools
    import threading

    loop = asyncio.get_running_loop()
    done: asyncio.Future[R] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not done.cancelled():
            outcome()

    def run() -> None:
        try:
            result = fn()
        except BaseException as exc:  # handed to the awaiting task
            error = exc
            outcome = functools.partial(done.set_exception, error)
        else:
            outcome = functools.partial(done.set_result, result)
        with contextlib.suppress(RuntimeError):  # the loop already closed: nobody waits
            loop.call_soon_threadsafe(settle, outcome)

    threading.Thread(target=run, name="watch-figures", daemon=True).start()
    return await done


async def _figures(cfg: Settings, pool: Any, router: Any, sale_id: int, scraper: Any) -> Any:
    """The sale's state and the figures now: what a frame and a JSON line both show."""
    import datetime as dt
    import functools

    from flashsale.cli.views import WatchFrame
    from flashsale.observe.figures import figures_now
    from flashsale.observe.state import sale_view

    sale = await sale_view(pool, router, sale_id)
    items = [item.item_id for item in sale.items]
    # HTTP to Prometheus or the pages is blocking: off the loop, beside the Redis calls.
    figures = await _on_daemon_thread(functools.partial(figures_now, cfg, scraper, items))
    return WatchFrame.of(sale, figures, dt.datetime.now(dt.UTC)), sale, figures


async def _frame(cfg: Settings, pool: Any, router: Any, sale_id: int, scraper: Any) -> Any:
    from flashsale.observe.console import frame

    shown, sale, figures = await _figures(cfg, pool, router, sale_id, scraper)
    return frame(sale, figures, shown.at)


async def _stream(
    args: argparse.Namespace, cfg: Settings, pool: Any, router: Any, sale_id: int
) -> int:
    """--json: a line per refresh, flushed, so `| jq` shows each as it comes; --once: one."""
    import asyncio

    from flashsale.cli import output
    from flashsale.observe.figures import Scraper

    scraper = Scraper(cfg)
    next_at = time.monotonic()
    printed = 0
    while True:
        output.print_json((await _figures(cfg, pool, router, sale_id, scraper))[0])
        sys.stdout.flush()
        printed += 1
        if args.once or printed == args.count:
            return 0
        next_at += args.interval
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))


def _watch(args: argparse.Namespace, cfg: Settings) -> int:
    import asyncio

    from rich.console import Console
    from rich.live import Live

    from flashsale.cli.connect import run_stack
    from flashsale.cli.errors import Failure
    from flashsale.observe.figures import Scraper
    from flashsale.observe.state import NoSale, pick_sale

    console = Console()

    async def work(pool: Any, router: Any) -> int:
        try:
            sale_id = await pick_sale(pool, args.sale)
        except NoSale as exc:
            raise Failure(str(exc)) from None
        if args.json:
            return await _stream(args, cfg, pool, router, sale_id)
        scraper = Scraper(cfg)
        if args.once or not console.is_terminal:
            # Off a terminal (a pipe, a log): one frame, as plain text.
            console.print(await _frame(cfg, pool, router, sale_id, scraper))
            return 0
        with Live(await _frame(cfg, pool, router, sale_id, scraper), console=console) as live:
            next_at = time.monotonic()
            for _ in range(1, args.count or sys.maxsize):
                next_at += args.interval
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                live.update(await _frame(cfg, pool, router, sale_id, scraper))
        return 0

    try:
        return run_stack(cfg, work)
    except KeyboardInterrupt:  # Ctrl-C is how a watch ends
        return 0


def add_watch(sub: Subcommands) -> None:
    p = command(
        sub,
        "watch",
        "watch a sale live: stock, orders, answers/s, latency, lag, drift, alerts",
        _watch,
    )
    p.add_argument(
        "--sale",
        type=integer,
        metavar="SALE_ID",
        help="the sale to watch (default: the armed sale on sale now, else the one armed last)",
    )
    p.add_argument(
        "--interval",
        type=at_least(1),
        default=1,
        metavar="SECONDS",
        help="redraw every SECONDS (default: 1)",
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="print one frame and exit (also what it does when stdout is not a terminal, "
        "unless --json)",
    )
    p.add_argument(
        "--count",
        type=at_least(1),
        metavar="N",
        help="stop after N refreshes (default: until interrupted)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per line per refresh, on a terminal or not (shape: docs/cli.md)",
    )
