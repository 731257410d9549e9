"""The report's summary lines, printed beside the PNG."""

from __future__ import annotations

import datetime as dt

from flashsale.observe.timeline import ItemLine, Points, Timeline


def _at(moment: float) -> str:
    return dt.datetime.fromtimestamp(moment, dt.UTC).strftime("%H:%M:%S.%f")[:-3] + " UTC"


def peak_of(points: Points) -> float | None:
    values = [v for _, v in points if v == v]  # NaN (no request in that step) left out
    return max(values) if values else None


def _item(line: ItemLine) -> str:
    sold = sum(n for s, n in line.statuses.items() if s in ("PENDING", "PAID"))
    statuses = ", ".join(f"{s} {n:,}" for s, n in sorted(line.statuses.items())) or "no orders"
    text = f"{line.quantity:,} units, {sold:,} sold in the database ({statuses})"
    if line.sold_out_at is None:
        return text + "; not sold out"
    first = line.reserved_db[0][0] if line.reserved_db else None
    after = f", {line.sold_out_at - first:.1f} s after the first order" if first else ""
    text += f"; sold out at {_at(line.sold_out_at)}{after}"
    seen = []
    if line.sold_out_db is not None:
        seen.append(f"the last unit's reservation {_at(line.sold_out_db)}")
    if line.sold_out_redis is not None:
        seen.append(f"Prometheus read 0 units left at {_at(line.sold_out_redis)}")
    text += f" ({'; '.join(seen)})"
    return text


def lines(t: Timeline, png: str) -> list[str]:
    found = [
        f"report: sale {t.sale_id} ({t.name}), {len(t.items)} item(s); from {t.source}",
        f"  window       {_at(t.start)} to {_at(t.end)}"
        f" ({t.end - t.start:.0f} s, step {t.step:g} s)",
    ]
    if t.answered:
        total = sum(t.answered.values())
        parts = ", ".join(
            f"{o} {n:,.0f}" for o, n in sorted(t.answered.items(), key=lambda x: -x[1])
        )
        found.append(f"  answers      {total:,.0f} ({parts})")
    for line in t.items:
        found.append(f"  item {line.item_id:<7} {_item(line)}")
    for name, points in sorted(t.latency.items()):
        peak = peak_of(points)
        if peak is not None:
            found.append(f"  {name:<12} peak {peak * 1000:.1f} ms")
    for topic, points in sorted(t.writer_lag.items()):
        peak = peak_of(points)
        if peak is not None:
            found.append(f"  writer lag   {topic}: peak {peak:,.0f} messages")
    found.append(f"  chart        {png}")
    return found
