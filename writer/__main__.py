"""``python -m writer``: one batched Kafka -> PostgreSQL writer of orders and flash voucher uses
(uvloop), logging to stderr (kernel/logs.py)."""

from __future__ import annotations

import argparse
import sys

from kernel.settings import settings
from writer.app import main


def cli() -> int:
    parser = argparse.ArgumentParser(prog="python -m writer", description=__doc__)
    parser.add_argument(
        "--once", action="store_true", help="exit once the group has drained the topic"
    )
    cfg = settings()
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=cfg.writer_metrics_port,
        help="serve /metrics here (default FLASHSALE_WRITER_METRICS_PORT; 0 picks a free port, "
        "-1 serves none)",
    )
    args = parser.parse_args()
    port = None if args.metrics_port < 0 else args.metrics_port
    return main(cfg, once=args.once, metrics_port=port)


if __name__ == "__main__":
    sys.exit(cli())
