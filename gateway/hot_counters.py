"""Counters for the purchase hot path: plain ints bumped with no lock, exported at scrape time.

A prometheus-client Counter takes a mutex on every ``inc()`` (~2 µs here): on the sold-out path
that was a fifth of the handler's own cost. One event loop per process bumps these, so a dict of
ints is exact; ``/metrics`` reads them through a custom collector.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector


class HotCounter(Collector):
    def __init__(
        self, name: str, documentation: str, labels: tuple[str, ...], keys: list[tuple[str, ...]]
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self.counts: dict[tuple[str, ...], int] = dict.fromkeys(keys, 0)

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation, labels=list(self.labels))
        for key, value in self.counts.items():
            family.add_metric(list(key), value)
        yield family
