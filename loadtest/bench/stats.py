"""Summaries over repeats: min / median / max of a figure, and of its paired ratio to a baseline
(the ratio is taken per repeat, between runs made side by side, then summarised)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Run = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Summary:
    low: float
    median: float
    high: float
    count: int


def summarize(values: Iterable[float]) -> Summary | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return Summary(ordered[0], statistics.median(ordered), ordered[-1], len(ordered))


def select(runs: Sequence[Run], phase: str, scenario: str, subject: str) -> list[Run]:
    return [
        r
        for r in runs
        if r["phase"] == phase and r["scenario"] == scenario and r["subject"] == subject
    ]


def figure(runs: Sequence[Run], metric: str) -> Summary | None:
    return summarize(float(r["metrics"][metric]) for r in runs if metric in r["metrics"])


def paired_ratio(subject: Sequence[Run], baseline: Sequence[Run], metric: str) -> Summary | None:
    """subject / baseline for every repeat that has both."""
    base = {r["repeat"]: float(r["metrics"][metric]) for r in baseline if metric in r["metrics"]}
    return summarize(
        float(r["metrics"][metric]) / base[r["repeat"]]
        for r in subject
        if metric in r["metrics"] and base.get(r["repeat"])
    )
