"""``flashsale``: the one command-line entry point (stack, migrate, gateway, writer, jobs, demo)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence

from .config import Settings, settings

Handler = Callable[[argparse.Namespace, Settings], int]


def _stack(args: argparse.Namespace, cfg: Settings) -> int:
    import stack

    if args.action == "up":
        took = stack.up(cfg)
        from .migrate import migrate

        applied = migrate(cfg)
        print(f"stack: up in {took:.1f}s; migrations applied: {applied or 'none pending'}")
        _print_status(cfg)
    elif args.action == "down":
        stack.down(cfg)
    else:
        _print_status(cfg)
    return 0


def _print_status(cfg: Settings) -> None:
    import stack

    for name, state in stack.status(cfg).items():
        print(f"  {name:<9} {state}")
    print(f"  logs      {cfg.log_dir}/")


def _migrate(args: argparse.Namespace, cfg: Settings) -> int:
    from .migrate import migrate

    applied = migrate(cfg)
    print(f"migrations applied: {applied or 'none pending'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flashsale", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("stack", help="start, stop or show the local Redis/Kafka/PostgreSQL stack")
    p.add_argument("action", choices=["up", "down", "status"])
    p.set_defaults(handler=_stack)

    p = sub.add_parser("migrate", help="apply pending database migrations")
    p.set_defaults(handler=_migrate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    started = time.monotonic()
    try:
        return handler(args, settings())
    except KeyboardInterrupt:
        return 130
    finally:
        if getattr(args, "timed", False):
            print(f"took {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    sys.exit(main())
