"""Per-key token buckets kept in process (per user, per IP): no I/O on the hot path."""

from __future__ import annotations

import math


class TokenBuckets:
    """``take(key, now)`` returns 0.0 when allowed, else the seconds until a token is back."""

    def __init__(self, rate_per_s: float, burst: float, max_keys: int = 1_000_000) -> None:
        self.rate = rate_per_s
        self.burst = burst
        self.max_keys = max_keys
        self._buckets: dict[object, tuple[float, float]] = {}

    def take(self, key: object, now: float) -> float:
        tokens, last = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate
        if len(self._buckets) >= self.max_keys:
            self.sweep(now)
        self._buckets[key] = (tokens - 1.0, now)
        return 0.0

    def sweep(self, now: float) -> None:
        """Forget buckets that have refilled: they behave exactly like new ones."""
        full_after = self.burst / self.rate
        self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < full_after}

    def __len__(self) -> int:
        return len(self._buckets)


def retry_after_seconds(wait: float) -> int:
    return max(1, math.ceil(wait))
