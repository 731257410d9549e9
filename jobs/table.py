"""The reconciliation reports as a plain text table, one row per item or voucher."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def render(columns: str, rows: Iterable[Sequence[object]]) -> str:
    """``columns`` names each column with the format spec of its cells, ``"item:>8 qty:>7"``;
    each row has a cell per column."""
    specs = [column.split(":") for column in columns.split()]
    header = " ".join(format(title, spec) for title, spec in specs)
    lines = [header, "-" * len(header)]
    for row in rows:
        cells = zip(row, specs, strict=True)
        lines.append(" ".join(format(value, spec) for value, (_, spec) in cells))
    return "\n".join(lines)
