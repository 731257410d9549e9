"""The console's frame (rich renderables) from a sale's state and the figures beside it."""

from __future__ import annotations

import datetime as dt

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from flashsale.observe.figures import Figures, Quantiles
from flashsale.observe.state import ItemView, SaleView

# The outcomes in the order of a purchase's checks (gateway/purchase.py), the rest after.
OUTCOMES = (
    "accepted",
    "sold_out_flag",
    "sold_out",
    "already_purchased",
    "rate_limited",
    "unavailable",
    "sale_not_open",
    "unauthorized",
    "item_not_found",
    "bad_request",
)


def _n(value: float | int | None) -> str:
    if value is None:
        return "?"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"


def stock_table(sale: SaleView) -> Table:
    table = Table(title="Stock (Redis) and orders (PostgreSQL)", title_justify="left")
    for name in ("item", "shard", "node", "left", "holds", "outbox", "sold in db", "FAILED"):
        table.add_column(name, justify="left" if name in ("item", "node") else "right")
    for item in sale.items:
        for shard in item.shards:
            table.add_row(
                str(item.item_id),
                str(shard.shard),
                shard.node,
                _n(shard.left),
                _n(shard.holds),
                _n(shard.outbox),
                _n(shard.sold_db),
                _n(shard.failed_db),
            )
        table.add_row(*_item_total(item), style="bold", end_section=True)
    return table


def _item_total(item: ItemView) -> list[str]:
    state = " paused" if item.paused else ""
    return [
        str(item.item_id),
        "all",
        f"{item.product_id}{state}",
        _n(item.left),
        _n(item.holds),
        "",
        f"{item.sold:,}/{item.quantity:,}",
        _n(item.failed_db),
    ]


def answers_line(figures: Figures) -> Text:
    """Accepted always, the other outcomes while they happen."""
    known = [o for o in OUTCOMES if o in figures.answers]
    others = sorted(set(figures.answers) - set(OUTCOMES))
    shown = [o for o in [*known, *others] if o == "accepted" or figures.answers[o] > 0]
    parts = [f"{o} {_n(figures.answers[o])}" for o in shown]
    total = sum(figures.answers.values())
    return Text(f"Answers /s: {_n(total)} — " + (" · ".join(parts) or "none yet"))


def latency_table(figures: Figures) -> Table:
    table = Table(title="Latency", title_justify="left")
    for name in ("what", "p50", "p99"):
        table.add_column(name, justify="left" if name == "what" else "right")
    rows: list[tuple[str, Quantiles]] = [("reservation (Redis + Kafka ack)", figures.reservation)]
    # The purchase route always; the others while they are asked for.
    rows += [
        (route, q)
        for route, q in sorted(figures.routes.items())
        if route.endswith("/purchase") or q != (None, None)
    ]
    for what, (p50, p99) in rows:
        table.add_row(what, _ms(p50), _ms(p99))
    return table


def lag_line(figures: Figures) -> Text:
    parts = [f"{topic} {_n(lag)}" for topic, lag in sorted(figures.writer_lag.items())]
    return Text("Writer lag (messages): " + (" · ".join(parts) or "no writer reporting"))


def findings_line(figures: Figures, sale: SaleView) -> Text:
    parts = []
    for item in sale.items:
        found = figures.findings.get(str(item.item_id))
        if found is None:
            parts.append(f"item {item.item_id}: not reconciled")
            continue
        drift = found.get("drift_units", 0)
        extra = ", ".join(
            f"{name.split('_')[0]} {_n(found[name])}"
            for name in ("lost_units", "ghost_holds", "stale_holds", "failed_orders")
            if found.get(name)
        )
        parts.append(f"item {item.item_id}: drift {_n(drift)}" + (f" ({extra})" if extra else ""))
    style = "bold red" if any(f.get("drift_units") for f in figures.findings.values()) else ""
    return Text("Reconciliation: " + "; ".join(parts), style=style)


def alerts_text(figures: Figures) -> Text:
    if figures.alerts is None:
        return Text("Alerts: unknown (Prometheus did not answer)", style="yellow")
    if not figures.alerts:
        return Text("Alerts firing: none", style="green")
    lines = [f"  {a.name}: {a.summary or a.labels}" for a in figures.alerts]
    return Text("Alerts firing:\n" + "\n".join(lines), style="bold red")


def frame(sale: SaleView, figures: Figures, now: dt.datetime | None = None) -> RenderableType:
    moment = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d %H:%M:%S UTC")
    head = Text(f"flashsale watch — sale {sale.sale_id} ({sale.name}) — {moment}", style="bold")
    parts: list[RenderableType] = [head, Text(f"figures from {figures.source}", style="dim")]
    if sale.redis_error:
        parts.append(Text(sale.redis_error, style="yellow"))
    if figures.missing:
        parts.append(Text("not answering: " + ", ".join(figures.missing), style="yellow"))
    parts += [
        stock_table(sale),
        answers_line(figures),
        latency_table(figures),
        lag_line(figures),
        findings_line(figures, sale),
        alerts_text(figures),
    ]
    return Group(*parts)
