"""The spike's latency and throughput plot (loadtest/scenarios/plot.py) from Locust's history."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from loadtest.scenarios.plot import PERCENTILES, plot_history

FIELDS = ["Timestamp", "Name", "User Count", "Total Request Count", *PERCENTILES]


def _history(path: Path, latencies: list[str]) -> Path:
    with path.open("w", newline="") as f:
        rows = csv.DictWriter(f, fieldnames=FIELDS)
        rows.writeheader()
        for second, latency in enumerate(latencies):
            row = {"Timestamp": str(1_700_000_000 + second), "Name": "Aggregated"}
            row |= {"User Count": "50", "Total Request Count": str(100 * second)}
            rows.writerow(row | dict.fromkeys(PERCENTILES, latency))
    return path


@pytest.mark.parametrize(
    "latencies",
    [["N/A", "N/A"], ["0", "0", "0"], ["N/A", "12", "30"]],
    ids=["no answer yet", "all zero", "answered"],
)
def test_a_history_plots_whatever_its_latencies(tmp_path: Path, latencies: list[str]) -> None:
    """A short spike on a starved machine can leave a history with no positive latency: the
    plot is drawn all the same (log-scaled only when there is something to scale)."""
    out = plot_history(_history(tmp_path / "h.csv", latencies), tmp_path / "plot.png")
    assert out.stat().st_size > 1000
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
