"""``flashsale``: the parser (commands in the order of a sale's life) and the one place that
turns an error into a line on stderr and an exit status."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import traceback
from collections.abc import Sequence

from flashsale.cli.completion import add_completion
from flashsale.cli.errors import CliError
from flashsale.cli.fairness import add_fairness
from flashsale.cli.fleet import add_fleet
from flashsale.cli.item import add_item
from flashsale.cli.parser import Parser, subcommands
from flashsale.cli.processes import add_expiry, add_failover_watch, add_gateway, add_writer
from flashsale.cli.reconcile import add_reconcile
from flashsale.cli.report import add_report
from flashsale.cli.room import add_room
from flashsale.cli.sale import add_sale
from flashsale.cli.stack import add_migrate, add_stack
from flashsale.cli.tools import add_demo, add_token
from flashsale.cli.voucher import add_voucher
from flashsale.cli.watch import add_watch
from kernel.settings import settings

# `flashsale --help` lists them in this order: the order an operator meets them in. Each
# command module imports the Redis and Kafka clients inside its handlers, so --help and a
# refused option answer without loading them.
COMMANDS = (
    add_stack,
    add_migrate,
    add_sale,
    add_gateway,
    add_writer,
    add_fleet,
    add_item,
    add_room,
    add_watch,
    add_expiry,
    add_failover_watch,
    add_reconcile,
    add_report,
    add_fairness,
    add_voucher,
    add_demo,
    add_token,
    add_completion,
)

DESCRIPTION = """\
The flash-sale gateway's operator command line. A sale's life, in the order of the commands:
start the stack and migrate; create a sale, check it (sale show), arm it; run gateways (or a
fleet of them behind a balancer) and a writer; watch and pause items, pause or pace a waiting
room; run expiry; reconcile; report; vouchers alongside."""

EPILOG = """\
Exit status: 0 done; 1 failed (not found, not ready, drift, answered no); 2 usage error (an
option breaks a rule, or a dangerous step lacks --yes when stdin is not a terminal).
Settings come from FLASHSALE_* environment variables (README). `flashsale COMMAND --help`
describes each command; docs/cli.md documents the --json shapes."""

DISTRIBUTION = "flashsale-gateway"  # pyproject.toml's [project] name

# Where a foreign exception comes from, by the top package of its class.
_SOURCES = {"asyncpg": "PostgreSQL", "redis": "Redis", "cimpl": "Kafka", "confluent_kafka": "Kafka"}


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the command list in two columns ("reconcile" is longer than argparse expects)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=16)


def build_parser() -> Parser:
    parser = Parser(
        prog="flashsale",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_Formatter,
    )
    parser.add_argument(
        "--debug", action="store_true", help="on a failure, print the Python traceback too"
    )
    parser.add_argument("--version", action="version", version=f"flashsale {version()}")
    commands = subcommands(parser, "command")
    for add in COMMANDS:
        add(commands)
    return parser


def version() -> str:
    """The installed distribution's version (the wheel's, or the editable checkout's)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # run from a tree that was never installed
        return "unknown (not installed)"


def describe(exc: BaseException) -> str:
    """One line for an error no command turned into a CliError."""
    from kernel.errors import ShardUnavailable

    text = str(exc) or type(exc).__name__
    if isinstance(exc, ShardUnavailable):
        return f"Redis did not answer: {text}"
    if isinstance(exc, OSError | TimeoutError):
        return f"cannot reach the stack: {text} (is it up? `flashsale stack status`)"
    source = _SOURCES.get(type(exc).__module__.split(".")[0])
    if source is not None:
        return f"{source}: {text}"
    return f"{type(exc).__name__}: {text}"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args  # known even when parsing itself is what fails
    try:
        parsed = build_parser().parse_args(args)
        status: int = parsed.handler(parsed, settings())
        return status
    except CliError as exc:
        if debug:
            traceback.print_exc()
        print(f"flashsale: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        print("flashsale: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `flashsale … | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:
        if debug:
            traceback.print_exc()
        hint = "" if debug else " (--debug shows the traceback)"
        print(f"flashsale: {describe(exc)}{hint}", file=sys.stderr)
        return 1
