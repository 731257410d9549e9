"""The report's PNG: four panels over the sale's window, one time axis: answers per second by
outcome, units sold (Redis and the database), latency percentiles, the writers' lag; a line at
each item's sell-out instant."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from flashsale.observe.timeline import Points, Timeline


def _times(points: Points) -> list[dt.datetime]:
    return [dt.datetime.fromtimestamp(t, dt.UTC) for t, _ in points]


def _plot(axis: Any, points: Points, label: str, scale: float = 1.0, **style: Any) -> None:
    if points:
        if len(points) <= 30:
            style.setdefault("marker", ".")  # a few readings (scrapes a busy gateway missed)
        axis.plot(_times(points), [v * scale for _, v in points], label=label, **style)


def _empty(axis: Any, text: str) -> None:
    axis.text(0.5, 0.5, text, ha="center", va="center", transform=axis.transAxes, color="grey")


def draw(timeline: Timeline, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display: a file
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    t = timeline
    fig, (answers, sold, latency, lag) = plt.subplots(4, 1, figsize=(11, 13), sharex=True)
    fig.suptitle(f"Sale {t.sale_id} ({t.name}): {t.source}")
    for outcome, points in sorted(t.answers.items()):
        _plot(answers, points, outcome)
    answers.set_ylabel("answers / s")
    answers.set_yscale("symlog", linthresh=10)  # 100 accepted beside 100,000 sold-out
    answers.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 0 else ""))
    if not t.answers:
        _empty(answers, "no answers recorded by Prometheus")
    for item in t.items:
        tag = f"item {item.item_id}"
        _plot(
            sold,
            item.sold_redis,
            f"{tag}: Redis, quantity - left (to a scrape)",
            drawstyle="steps-post",
        )
        _plot(sold, item.reserved_db, f"{tag}: orders by reservation time", drawstyle="steps-post")
        _plot(sold, item.stored_db, f"{tag}: orders by store time", drawstyle="steps-post")
        sold.axhline(item.quantity, color="grey", linewidth=0.5, linestyle=":")
        # Sold out: as Prometheus saw Redis reach 0 (to a scrape), and the database's last unit
        # (its reservation's own clock, to the millisecond).
        for at, style, source in (
            (item.sold_out_redis, "--", "Redis at 0"),
            (item.sold_out_db, ":", "last unit in db"),
        ):
            if at is None:
                continue
            moment = dt.datetime.fromtimestamp(at, dt.UTC)
            for axis in (answers, sold, latency, lag):
                axis.axvline(moment, color="red", linewidth=0.8, linestyle=style)
            sold.annotate(
                f" {tag} sold out ({source})",
                (moment, item.quantity),
                color="red",
                fontsize="small",
                rotation=90,
                va="top",
            )
    sold.set_ylabel("units sold")
    for name, points in sorted(t.latency.items()):
        _plot(latency, points, name, scale=1000)
    latency.set_ylabel("ms")
    if not t.latency:
        _empty(latency, "no latency recorded by Prometheus")
    for topic, points in sorted(t.writer_lag.items()):
        _plot(lag, points, topic)
    lag.set_ylabel("writer lag (messages)")
    lag.set_ylim(bottom=0)
    if not t.writer_lag:
        _empty(lag, "no writer lag recorded by Prometheus")
    for axis in (answers, sold, latency, lag):
        axis.grid(True, alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(loc="upper right", fontsize="small")
    clock = mdates.DateFormatter("%H:%M:%S", tz=dt.UTC)  # type: ignore[no-untyped-call]
    lag.xaxis.set_major_formatter(clock)
    lag.set_xlim(_times([(t.start, 0), (t.end, 0)]))  # the whole window, data or not
    lag.set_xlabel("UTC")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
