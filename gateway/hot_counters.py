"""Counters and a histogram for the purchase hot path: plain ints bumped with no lock, exported
at scrape time.

A prometheus-client Counter takes a mutex on every ``inc()`` (~2 µs here): on the sold-out path
that was a fifth of the handler's own cost. One event loop per process bumps these, so a dict of
ints is exact; ``/metrics`` reads them through a custom collector.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class HotCounter(Collector):
    def __init__(
        self, name: str, documentation: str, labels: tuple[str, ...], keys: list[tuple[str, ...]]
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self.counts: dict[tuple[str, ...], int] = dict.fromkeys(keys, 0)
        self._mirrors: dict[tuple[str, ...], tuple[HotCounter, tuple[str, ...]]] = {}

    def mirror(self, key: tuple[str, ...], source: HotCounter, source_key: tuple[str, ...]) -> None:
        """Export ``key`` as ``source``'s count of ``source_key`` too (two series bumped by the
        same event cost one increment on the hot path)."""
        self._mirrors[key] = (source, source_key)

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation, labels=list(self.labels))
        for key, value in self.counts.items():
            mirrored = self._mirrors.get(key)
            extra = mirrored[0].counts[mirrored[1]] if mirrored else 0
            family.add_metric(list(key), value + extra)
        yield family


class HotHistogram(Collector):
    """A label-less histogram whose ``observe`` is a bisect and two additions (prometheus-client's
    takes a mutex, ~7 µs of every reservation here)."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = sorted(buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def collect(self) -> Iterator[HistogramMetricFamily]:
        cumulative, running = [], 0
        labels = [*map(floatToGoString, self.bounds), "+Inf"]
        for bound, count in zip(labels, self.counts, strict=True):
            running += count
            cumulative.append((bound, running))
        family = HistogramMetricFamily(self.name, self.documentation)
        family.add_metric([], cumulative, self.total)
        yield family
