"""What ``sale create`` and ``voucher create`` share: the request body from ``--from FILE``, or
from options whose defaults apply only when no file is given, and moments from seconds."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flashsale.cli.errors import UsageError


def read_body(source: str) -> tuple[bytes, str]:
    """The bytes of ``--from FILE`` (``-``: stdin) and how to name them in an error."""
    if source == "-":
        return sys.stdin.buffer.read(), "--from stdin"
    try:
        return Path(source).read_bytes(), f"--from {source}"
    except OSError as exc:
        raise UsageError(f"--from: cannot read {source}: {exc.strerror}") from None


def options_or_defaults(args: argparse.Namespace, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The options' values, each default where it was not given. The parser's defaults are
    None, so that ``given`` can tell a default from an option typed next to --from."""
    return {
        k: default if getattr(args, k) is None else getattr(args, k)
        for k, default in defaults.items()
    }


def refuse_options_with_file(args: argparse.Namespace, names: list[str], what: str) -> None:
    given = [f"--{k.replace('_', '-')}" for k in names if getattr(args, k) not in (None, False)]
    if given:
        raise UsageError(f"--from: the file holds the whole {what}; drop {', '.join(given)}")


def moment(start: dt.datetime, seconds: int, option: str) -> dt.datetime:
    """``seconds`` after ``start``; one past the calendar (year 9999) breaks ``option``."""
    try:
        return start + dt.timedelta(seconds=seconds)
    except OverflowError:
        raise UsageError(f"{option}: {seconds} s from now is past the year 9999") from None
