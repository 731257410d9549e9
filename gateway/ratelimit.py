"""Per-key token buckets kept in process (per user, per client address): no I/O on the hot
path, and the limits built from them for every route a buyer or a scraper can reach."""

from __future__ import annotations

import math
import time

from gateway.errors import RateLimited
from kernel.settings import Settings


class TokenBuckets:
    """``take(key, now)`` returns 0.0 when allowed, else the seconds until a token is back."""

    def __init__(self, rate_per_s: float, burst: float, max_keys: int = 1_000_000) -> None:
        self.rate = rate_per_s
        self.burst = burst
        self.max_keys = max_keys
        self._buckets: dict[object, tuple[float, float]] = {}

    def _level(self, key: object, now: float) -> float:
        tokens, last = self._buckets.get(key, (self.burst, now))
        return min(self.burst, tokens + (now - last) * self.rate)

    def waiting(self, key: object, now: float) -> float:
        """What ``take`` would answer, without taking a token."""
        tokens = self._level(key, now)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    def take(self, key: object, now: float) -> float:
        tokens = self._level(key, now)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate
        if len(self._buckets) >= self.max_keys:
            self.sweep(now)
        self._buckets[key] = (tokens - 1.0, now)
        return 0.0

    def check(self, key: object) -> None:
        """Take a token for ``key`` now, or raise 429 RATE_LIMITED with its Retry-After."""
        wait = self.take(key, time.monotonic())
        if wait:
            raise RateLimited(retry_after=retry_after_seconds(wait))

    def sweep(self, now: float) -> None:
        """Forget buckets that have refilled: they behave exactly like new ones."""
        full_after = self.burst / self.rate
        self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < full_after}

    def __len__(self) -> int:
        return len(self._buckets)


class RouteLimits:
    """The buckets of the routes other than the purchase: order lookups, pay and cancel count
    per buyer (after the per-address bucket the purchase shares, before the token), the
    operations endpoints per address."""

    def __init__(self, cfg: Settings, per_address: TokenBuckets) -> None:
        self.per_address = per_address
        self.orders = TokenBuckets(cfg.order_rate_per_s, cfg.order_burst)
        self.ops = TokenBuckets(cfg.ops_rate_per_s, cfg.ops_burst)
        # A sale's waiting room: joins and polls per buyer (gateway/waiting_room/join.py, poll.py).
        self.queue = TokenBuckets(cfg.waiting_room_buyer_rate_per_s, cfg.waiting_room_buyer_burst)
        # Joins per client address: one address must not join a crowd of buyer ids.
        self.joins = TokenBuckets(
            cfg.waiting_room_join_address_rate_per_s, cfg.waiting_room_join_address_burst
        )
        # Wrong admin and service tokens, per address (gateway/requests.py require_bearer).
        self.auth_failures = TokenBuckets(cfg.auth_failure_rate_per_s, cfg.auth_failure_burst)


def retry_after_seconds(wait: float) -> int:
    return max(1, math.ceil(wait))
