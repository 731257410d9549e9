"""Ask before a dangerous step (re-arming, pausing an item on sale, fixing a live one)."""

from __future__ import annotations

import sys

from flashsale.cli.errors import Declined, UsageError


def confirm(what: str, *, yes: bool) -> None:
    """Return when the operator agrees to ``what`` (one sentence: what will happen): with
    ``--yes``, or "y" typed on the terminal. Off a terminal and without ``--yes`` refuse
    (UsageError, exit 2) rather than guess: a script has to say --yes."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise UsageError(f"{what}; stdin is not a terminal to ask on: pass --yes to go on")
    # The question goes to stderr, so --json keeps stdout a single JSON document.
    print(f"{what}.", file=sys.stderr)
    print("Go on? [y/N] ", end="", file=sys.stderr, flush=True)
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise Declined("answered no: nothing was changed")
