"""argparse, made to fail in one line: the parser, the option types and the shared flags.

argparse (standard library) does what this needs: nested subcommands, help per option, typed
values. Its one habit that does not fit, a usage dump before the error, is replaced here.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn

from flashsale.cli.errors import UsageError
from kernel.settings import Settings

Handler = Callable[[argparse.Namespace, Settings], int]
Subcommands = Any  # argparse's _SubParsersAction is private; it has no public name to annotate


class Parser(argparse.ArgumentParser):
    """Raises UsageError (exit 2, one line) instead of printing the usage and exiting."""

    def error(self, message: str) -> NoReturn:
        # "argument --quantity: must be …" → "--quantity: must be …"
        raise UsageError(message.removeprefix("argument "))


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An integer option only the command line has (no API field holds its rule)."""

    def parse(text: str) -> int:
        value = integer(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}")
        return value

    return parse


# --debug on every (sub)command, so it may come anywhere on the line. SUPPRESS keeps a
# subcommand's parser from resetting a --debug given before it.
COMMON = Parser(add_help=False)
COMMON.add_argument(
    "--debug",
    action="store_true",
    default=argparse.SUPPRESS,
    help="on a failure, print the Python traceback too",
)


def command(sub: Subcommands, name: str, summary: str, handler: Handler | None = None) -> Parser:
    """A subcommand with ``summary`` as its line in the list and its description."""
    parser: Parser = sub.add_parser(
        name, help=summary, description=summary[0].upper() + summary[1:] + ".", parents=[COMMON]
    )
    if handler is not None:
        parser.set_defaults(handler=handler)
    return parser


def subcommands(parser: argparse.ArgumentParser, dest: str) -> Subcommands:
    return parser.add_subparsers(dest=dest, metavar=dest.upper(), required=True)


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document instead of a table (shape: docs/cli.md)",
    )


def add_dry_run(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "-n", "--dry-run", action="store_true", help=f"print {what}; change nothing"
    )


def add_yes(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help=f"{what} without asking (needed when stdin is not a terminal)",
    )
