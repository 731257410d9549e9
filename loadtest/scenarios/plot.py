"""A run's plot from Locust's ``--csv-full-history`` file (``<prefix>_stats_history.csv``):
latency percentiles over time (Locust's "current" percentiles, over its last ~10 s) and
throughput per second, in total and per answer kind, with the user count (``spike.py`` draws
its run's)."""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend

PERCENTILES = ("50%", "95%", "99%")
MAX_SERIES = 6  # answer kinds drawn (the most frequent), besides the total


@dataclass
class Series:
    seconds: list[float] = field(default_factory=list)
    users: list[int] = field(default_factory=list)
    rps: list[float] = field(default_factory=list)
    total: int = 0
    percentiles: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan  # "N/A": no request in the window


def read_history(path: Path) -> dict[str, Series]:
    """Per name (``Aggregated`` for the total): per-second rate from the running totals."""
    series: dict[str, Series] = defaultdict(Series)
    last: dict[str, tuple[float, int]] = {}
    start: float | None = None
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            stamp, name = float(row["Timestamp"]), row["Name"]
            start = stamp if start is None else start
            count = int(float(row["Total Request Count"] or 0))
            prev_stamp, prev_count = last.get(name, (stamp - 1.0, 0))
            s = series[name]
            s.seconds.append(stamp - start)
            s.users.append(int(float(row["User Count"] or 0)))
            s.rps.append((count - prev_count) / max(stamp - prev_stamp, 1e-9))
            s.total = count
            for p in PERCENTILES:
                s.percentiles[p].append(_number(row[p]))
            last[name] = (stamp, count)
    return dict(series)


def plot_history(history_csv: Path, out_png: Path, title: str = "") -> Path:
    series = read_history(history_csv)
    total = series.get("Aggregated")
    if total is None:
        raise ValueError(f"{history_csv} has no Aggregated rows (run Locust --csv-full-history)")
    fig, (lat, thr) = plt.subplots(2, 1, sharex=True, figsize=(11, 7.5))
    for p in PERCENTILES:
        lat.plot(total.seconds, total.percentiles[p], label=f"p{p.rstrip('%')}")
    lat.set_ylabel("latency (ms)")
    # Log-scaled only with a positive sample to scale: a run whose history holds no answer yet
    # (a short spike on a starved machine) plots on a linear axis instead of failing.
    if any(v > 0 for p in PERCENTILES for v in total.percentiles[p]):
        lat.set_yscale("log")
    lat.set_title(title or "latency percentiles (Locust, ~10 s window) and throughput")
    lat.grid(True, which="both", alpha=0.3)
    lat.legend(loc="upper right")

    thr.plot(total.seconds, total.rps, color="black", linewidth=2, label="all answers")
    kinds = sorted((n for n in series if n != "Aggregated"), key=lambda n: -series[n].total)
    for name in kinds[:MAX_SERIES]:
        thr.plot(series[name].seconds, series[name].rps, linewidth=1, label=name)
    thr.set_ylabel("answers / s")
    thr.set_xlabel("seconds since the first sample")
    thr.grid(True, alpha=0.3)
    thr.legend(loc="upper left", fontsize="small")
    users = thr.twinx()
    users.plot(total.seconds, total.users, color="grey", linestyle="--", label="users")
    users.set_ylabel("users", color="grey")

    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png
