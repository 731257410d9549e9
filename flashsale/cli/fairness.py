"""``flashsale fairness SALE_ID``: a waiting-room sale's fairness as lines and a PNG
(flashsale/observe/fairness.py), from its queue in Redis and its orders in PostgreSQL."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from flashsale.cli.parser import Subcommands, add_json, command, integer
from kernel.settings import Settings


def _fairness(args: argparse.Namespace, cfg: Settings) -> int:
    from flashsale.cli.admin import show
    from flashsale.cli.connect import run_stack
    from flashsale.cli.report import drawn
    from flashsale.cli.views import FairnessView
    from flashsale.observe.fairness import write_fairness

    async def work(pool: Any, router: Any) -> int:
        report = write_fairness(cfg, pool, router, args.sale_id, args.out)
        found, path, lines = await drawn(report)
        return show(args, FairnessView.of(found, str(path)), lambda: "\n".join(lines))

    return run_stack(cfg, work)


def add_fairness(sub: Subcommands) -> None:
    p = command(
        sub,
        "fairness",
        "a waiting-room sale's fairness: arrival vs admission order, win rate per shard, "
        "early vs late winners, tickets per address (lines and a PNG)",
        _fairness,
    )
    p.add_argument("sale_id", type=integer, metavar="SALE_ID", help="the sale's id")
    p.add_argument(
        "--out",
        type=Path,
        metavar="PATH",
        help="the PNG (default: FLASHSALE_STATE_DIR/reports/sale-SALE_ID-fairness.png)",
    )
    add_json(p)
