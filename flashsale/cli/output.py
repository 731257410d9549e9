"""Printing: one JSON document on stdout for --json, aligned text otherwise, notes on stderr."""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

_encode = msgspec.json.Encoder().encode


def print_json(document: Any) -> None:
    """One line: ``flashsale … --json | jq`` and line-oriented tools both read it."""
    sys.stdout.write(_encode(document).decode() + "\n")


def note(text: str) -> None:
    """What was done (``item 12 paused``): on stderr, so stdout carries only the data."""
    print(text, file=sys.stderr)


@contextlib.contextmanager
def progress_on_stderr(as_json: bool) -> Iterator[None]:
    """With --json, stdout is the one document: what a step prints as it goes (``stack: redis
    ...``) goes to stderr for the block instead."""
    if not as_json:
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns as wide as their widest cell; numbers to the right, text to the left."""
    cells = [[str(h) for h in headers], *([_cell(v) for v in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    right = [bool(rows) and _numeric(rows[0][i]) for i in range(len(headers))]
    lines = [
        "  ".join(
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right, strict=True)
        ).rstrip()
        for row in cells
    ]
    return "\n".join(lines)


def _numeric(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dt.datetime):
        return when(value)
    return "-" if value is None else str(value)


def when(moment: dt.datetime | None) -> str:
    """A moment in UTC to the second, as the JSON has it (RFC 3339)."""
    if moment is None:
        return "-"
    return moment.astimezone(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
