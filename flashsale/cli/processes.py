"""The long-running processes: ``flashsale gateway``, ``writer``, ``expiry`` and
``failover-watch``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from flashsale.cli.parser import Subcommands, add_dry_run, add_json, at_least, command
from kernel.settings import Settings, settings


def _gateway(args: argparse.Namespace, cfg: Settings) -> int:
    argv = [sys.executable, "-m", "gateway"]
    for option, value in (
        ("--host", args.host),
        ("--port", args.port),
        ("--workers", args.workers),
    ):
        if value is not None:
            argv += [option, str(value)]
    os.execv(sys.executable, argv)  # noqa: S606 - granian wants to own the process


def _writer(args: argparse.Namespace, cfg: Settings) -> int:
    from writer.app import main as writer_main

    port = None if cfg.writer_metrics_port < 0 else cfg.writer_metrics_port
    return writer_main(cfg, once=args.once, metrics_port=port)


def _expiry(args: argparse.Namespace, cfg: Settings) -> int:
    import asyncio

    from flashsale.cli import views
    from flashsale.cli.connect import run_stack
    from flashsale.cli.errors import UsageError
    from flashsale.cli.output import print_json
    from jobs.expiry import expire_once, run_expiry
    from kernel import logs

    if args.json and not args.once:
        raise UsageError("--json: only with --once (a running expiry logs a line per round)")
    if args.dry_run and not args.once:
        raise UsageError("--dry-run: only with --once (a running expiry has no dry run)")
    logs.setup(cfg)  # a long-running job: its lines in the one format, like the writer's
    if args.dry_run:
        return _expiry_dry_run(cfg, args.json)

    async def work(pool: Any, router: Any) -> int:
        if args.once:
            expired = await expire_once(pool, router)
            if args.json:
                print_json(views.Expiry(expired))
            else:
                print(f"expired {expired} orders and voucher uses")
        else:
            await run_expiry(pool, router, cfg.expiry_interval_ms / 1000, asyncio.Event())
        return 0

    return run_stack(cfg, work)


def _expiry_dry_run(cfg: Settings, as_json: bool) -> int:
    """What one pass would expire now, read with the pass's own predicates; no Redis: giving
    units and uses back is the only thing the pass does there."""
    from flashsale.cli import views
    from flashsale.cli.connect import run_db
    from flashsale.cli.output import note, print_json
    from jobs.expiry import due_now

    due = run_db(cfg, due_now)
    if as_json:
        print_json(views.Expiry.due(due))
    else:
        print(f"would expire {due.total} orders and voucher uses")
        for item_id, orders in sorted(due.orders.items()):
            print(f"  item {item_id}: {orders} unpaid order(s) past their payment window")
        for code, uses in sorted(due.uses.items()):
            print(f"  voucher {code}: {uses} held use(s) past their hold window")
    note("dry run: nothing expired")
    return 0


def _failover_watch(args: argparse.Namespace, cfg: Settings) -> int:
    import asyncio
    import logging

    from jobs.redis_failover import watch
    from kernel import logs

    logs.setup(cfg)
    logging.getLogger(__name__).warning(
        "watching %d Redis nodes: a primary refusing %d probes in a row is failed over",
        len(cfg.redis_nodes),
        cfg.redis_failover_refusals,
    )
    asyncio.run(watch(cfg))
    return 0


def add_failover_watch(sub: Subcommands) -> None:
    command(
        sub,
        "failover-watch",
        "promote a Redis replica as soon as its primary's port refuses connections (a dead "
        "process, not a pause); run one beside the cluster (`stack up` does)",
        _failover_watch,
    )


def add_gateway(sub: Subcommands) -> None:
    cfg = settings()  # the defaults shown are the environment's
    p = command(sub, "gateway", "run the gateway (HTTP, granian + uvloop) in the foreground")
    p.set_defaults(handler=_gateway)
    p.add_argument(
        "--host",
        help=f"address to listen on (default: FLASHSALE_GATEWAY_HOST, now {cfg.gateway_host})",
    )
    p.add_argument(
        "--port",
        type=at_least(1, 65535),
        help=f"TCP port (default: FLASHSALE_GATEWAY_PORT, now {cfg.gateway_port})",
    )
    p.add_argument(
        "--workers",
        type=at_least(1),
        help=f"worker processes, one per core is right (default: FLASHSALE_GATEWAY_WORKERS, "
        f"now {cfg.gateway_workers})",
    )


def add_writer(sub: Subcommands) -> None:
    p = command(sub, "writer", "run the Kafka -> PostgreSQL order and voucher writer", _writer)
    p.add_argument(
        "--once",
        action="store_true",
        help="drain what is on the topics, then exit (default: run until SIGINT/SIGTERM)",
    )


def add_expiry(sub: Subcommands) -> None:
    p = command(
        sub,
        "expiry",
        "expire unpaid orders and held voucher uses; their units and uses go back",
        _expiry,
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="one pass, print how many expired, exit (default: a pass every "
        "FLASHSALE_EXPIRY_INTERVAL_MS, until interrupted)",
    )
    add_dry_run(p, "what one pass (--once) would expire, per item and voucher")
    add_json(p)  # with --once: {"expired": N}
