"""Latency percentiles, one definition for every figure: an HdrHistogram at microsecond
resolution, 3 significant digits: p99 of 1..100 ms is 99 ms, as by nearest rank, to within 0.1%."""

from __future__ import annotations

from collections.abc import Iterable

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

HIGHEST_US = 3_600_000_000  # an hour: no answer a benchmark waits for is slower
STANDARD = (50.0, 90.0, 99.0, 99.9)


class Latencies:
    """Recorded latencies; a value below 1 µs (or negative: a clock's jitter) counts as 1 µs."""

    def __init__(self) -> None:
        self._h = HdrHistogram(1, HIGHEST_US, 3)

    def add_us(self, us: float) -> None:
        self._h.record_value(min(HIGHEST_US, max(1, int(us))))

    def add_s(self, seconds: float) -> None:
        self.add_us(seconds * 1e6)

    def add_ms(self, ms: float) -> None:
        self.add_us(ms * 1e3)

    @property
    def count(self) -> int:
        return int(self._h.get_total_count())

    def ms(self, pct: float) -> float:
        """The ``pct`` percentile in ms (0 when nothing was recorded)."""
        return float(self._h.get_value_at_percentile(pct)) / 1000 if self.count else 0.0

    def max_ms(self) -> float:
        return float(self._h.get_max_value()) / 1000 if self.count else 0.0

    def mean_ms(self) -> float:
        return float(self._h.get_mean_value()) / 1000 if self.count else 0.0

    def figures(self, suffix: str = "", pcts: Iterable[float] = STANDARD) -> dict[str, float]:
        """``{"p50_ms<suffix>": ..., "p99.9" as "p999_ms<suffix>", "max_ms<suffix>"}``."""
        out = {f"p{pct:g}".replace(".", "") + f"_ms{suffix}": self.ms(pct) for pct in pcts}
        out[f"max_ms{suffix}"] = self.max_ms()
        return out


def of_seconds(values: Iterable[float]) -> Latencies:
    found = Latencies()
    for v in values:
        found.add_s(v)
    return found


def of_ms(values: Iterable[float]) -> Latencies:
    found = Latencies()
    for v in values:
        found.add_ms(v)
    return found
