"""What the alerts and the dashboard need from a gateway beyond gateway/metrics.py, measured
around the app rather than inside it (``observe``, applied by gateway/asgi.py):

- ``flashsale_http_request_seconds{route}`` and ``flashsale_http_responses_total{route,code}``:
  every request from the front's first line to its last byte handed to the server, and its
  status. The sold-out flag's 410 is left out: it is a dict lookup with no I/O, counted already
  by ``flashsale_purchase_requests_total{outcome="sold_out_flag"}``, and timing it would add a
  closure and two awaits to the path 98% of a spike takes.
- ``flashsale_sold_out_flag{item}``: 1 while this process's flag answers 410 for the item (the
  alert compares it with the stock the same process reads from Redis).
- ``flashsale_redis_node_open{node}``: 1 while the shard breaker fails calls to a Redis node
  fast, i.e. the purchases of its shards answer 503.
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from collections.abc import Awaitable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gateway.front import FlashSaleApp
from gateway.metrics import REGISTRY
from gateway.paths import PURCHASE_PREFIX, PURCHASE_SUFFIX

PURCHASE_ROUTE = f"{PURCHASE_PREFIX}{{item_id}}{PURCHASE_SUFFIX}"
UNMATCHED = "unmatched"  # a path no route has: one label value, whatever the client sent
BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class RouteStats(Collector):
    """Latency histograms and answer counts per route, plain ints as in hot_counters.py (one
    event loop per process bumps them)."""

    def __init__(self, buckets: tuple[float, ...] = BUCKETS) -> None:
        self.bounds = sorted(buckets)
        self.buckets: dict[str, list[int]] = {}
        self.sums: dict[str, float] = defaultdict(float)
        self.answers: dict[tuple[str, int], int] = defaultdict(int)

    def observe(self, route: str, status: int, seconds: float) -> None:
        counts = self.buckets.get(route)
        if counts is None:
            counts = self.buckets[route] = [0] * (len(self.bounds) + 1)  # the last is +Inf
        counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.sums[route] += seconds
        self.answers[(route, status)] += 1

    def collect(self) -> Iterator[HistogramMetricFamily | CounterMetricFamily]:
        latency = HistogramMetricFamily(
            "flashsale_http_request_seconds",
            "Whole request latency by route (the sold-out flag's 410 not included)",
            labels=["route"],
        )
        bounds = [*map(floatToGoString, self.bounds), "+Inf"]
        for route, counts in list(self.buckets.items()):
            running, cumulative = 0, []
            for bound, count in zip(bounds, counts, strict=True):
                running += count
                cumulative.append((bound, running))
            latency.add_metric([route], cumulative, self.sums[route])
        yield latency
        answers = CounterMetricFamily(
            "flashsale_http_responses",
            "Answers by route and status code (the sold-out flag's 410 not included)",
            labels=["route", "code"],
        )
        for (route, status), count in list(self.answers.items()):
            answers.add_metric([route, str(status)], count)
        yield answers


class Views(Collector):
    """Scrape-time views of the running front's state (none before its start-up)."""

    def __init__(self) -> None:
        self.front: FlashSaleApp | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        flags = GaugeMetricFamily(
            "flashsale_sold_out_flag",
            "1 while this process answers 410 for the item from its flag, 0 once it lapsed",
            labels=["item"],
        )
        open_nodes = GaugeMetricFamily(
            "flashsale_redis_node_open",
            "1 while the shard breaker fails calls to this Redis node fast (answers 503)",
            labels=["node"],
        )
        purchase = self.front.purchase if self.front is not None else None
        if purchase is not None:
            services = purchase.s
            for item_id in services.flags.flagged():
                up = services.flags.is_sold_out(item_id)
                flags.add_metric([str(item_id)], 1.0 if up else 0.0)
            for node in services.router.breaker.open_nodes():
                open_nodes.add_metric([node], 1.0)
        yield flags
        yield open_nodes


STATS = RouteStats()
VIEWS = Views()
REGISTRY.register(STATS)
REGISTRY.register(VIEWS)


def route_of(scope: dict[str, Any], path: str) -> str:
    if path.startswith(PURCHASE_PREFIX) and path.endswith(PURCHASE_SUFFIX):
        return PURCHASE_ROUTE
    route = scope.get("route")  # set by Starlette's router on the same scope dict
    found = getattr(route, "path", None)
    return found if isinstance(found, str) else UNMATCHED


class Observed:
    """``front`` with every request but the flag's 410 timed and counted by route."""

    def __init__(self, front: FlashSaleApp, stats: RouteStats = STATS) -> None:
        self.front = front
        self.stats = stats

    def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Awaitable[None]:
        # A plain function returning the coroutine, the front's test inlined: the flag's 410
        # pays one lookup and one clock read here (~0.4 µs), not a coroutine frame of its own.
        if scope["type"] == "http":
            purchase = self.front.purchase
            until = None
            if purchase is not None and scope["method"] == "POST":
                until = purchase.s.flags.by_path.get(scope["path"])
            if until is None or until <= time.monotonic():
                return self._timed(scope, receive, send)
        return self.front(scope, receive, send)

    async def _timed(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        started = time.perf_counter()
        status = 500  # what the server answers when the app raises before a response starts

        async def capture(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.front(scope, receive, capture)
        finally:
            elapsed = time.perf_counter() - started
            self.stats.observe(route_of(scope, scope["path"]), status, elapsed)


def observe(front: FlashSaleApp) -> Observed:
    VIEWS.front = front
    return Observed(front)
