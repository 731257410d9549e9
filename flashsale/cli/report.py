"""``flashsale report SALE_ID``: a sale's timeline as a PNG and a summary: answers per second by
outcome, units sold over time (Redis and the database), latency percentiles, the writers' lag
and the sell-out instant. From Prometheus's range queries (FLASHSALE_PROMETHEUS_URL) where it
kept the sale's series, and from the orders' timestamps in PostgreSQL always."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from flashsale.cli.parser import Subcommands, add_json, command, integer
from kernel.settings import Settings

T = TypeVar("T")


async def drawn(report: Awaitable[T]) -> T:
    """A report once its PNG is drawn; one line of failure when the sale is not there
    or matplotlib is missing (``report`` and ``fairness`` alike)."""
    from flashsale.cli.errors import Failure

    try:
        return await report
    except LookupError as exc:
        raise Failure(str(exc)) from None
    except ImportError as exc:  # matplotlib comes with the load tools
        raise Failure(f"the report needs matplotlib ({exc}): pip install '.[load]'") from None


def _report(args: argparse.Namespace, cfg: Settings) -> int:
    from flashsale.cli.admin import show
    from flashsale.cli.connect import run_db
    from flashsale.cli.views import Report
    from flashsale.observe.report import write_report

    async def work(pool: Any) -> int:
        found, path, lines = await drawn(write_report(cfg, pool, args.sale_id, args.out))
        return show(args, Report.of(found, str(path)), lambda: "\n".join(lines))

    return run_db(cfg, work)


def add_report(sub: Subcommands) -> None:
    p = command(
        sub,
        "report",
        "write a sale's timeline as a PNG (answers, units sold, latency, lag) and sum it up",
        _report,
    )
    p.add_argument("sale_id", type=integer, metavar="SALE_ID", help="the sale's id")
    p.add_argument(
        "--out",
        type=Path,
        metavar="PATH",
        help="the PNG to write (default: FLASHSALE_STATE_DIR/reports/sale-SALE_ID.png)",
    )
    add_json(p)
