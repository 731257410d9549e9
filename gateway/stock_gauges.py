"""The stock gauges /metrics shows (units left per item shard, uses left per flash voucher),
read from Redis at most once per interval however often the page is scraped: every live item's
shards in one cluster pipeline, the flash vouchers many at once. A scrape starts a reading and
waits a quarter of a second for it at most, then serves what the gauges hold.

One pipeline per shard in turn, inside the scrape, made a scrape cost a round trip and ~2 ms of
redis-py per shard of every live item: with 313 live items (885 shards) on the test stack a
scrape took 2-4 s, past Prometheus's 1 s timeout, on every gateway and every scrape; under a
spike the scrapes that timed out were the ones that mattered.

Only items whose sale is open or ended within ``AFTER_END_S`` are read and exported; an item
past that loses its series. The catalog keeps a day of sales: after a test run, 818 items and
2,079 shards (789 of them in sales not ended), all read and exported every second by an idle
gateway (the page alone: 0.6 ms of CPU with no shard series, 16 ms with 900, 59 ms with
3,000). An ended sale's stock sells no more; its history up to the end is in Prometheus.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from gateway import metrics
from gateway.services import Services
from shard_router import shard_keys
from shard_router.deadline import with_deadline

MIN_INTERVAL_S = 0.5  # a second scraper (a console, a test) within this reads the last values
WAIT_S = 0.25  # a scrape waits this long for a reading, then serves the last one
CONCURRENCY = 64  # voucher reads in flight at once
AFTER_END_S = 300.0  # a console or a report a few minutes after the sale still reads the last


class StockGauges:
    def __init__(self, min_interval_s: float = MIN_INTERVAL_S) -> None:
        self.min_interval_s = min_interval_s
        self._read_at = float("-inf")
        self._reading: asyncio.Task[None] | None = None
        self._exported: set[tuple[str, str]] = set()  # (item, shard) series set so far

    async def refresh(self, s: Services) -> None:
        """Start a reading unless one is under way or the last is fresh, and wait for it at most
        WAIT_S: a quiet gateway's page is current, a busy one's a reading old, never slow."""
        idle = self._reading is None or self._reading.done()
        if idle and time.monotonic() - self._read_at >= self.min_interval_s:
            self._read_at = time.monotonic()
            self._reading = asyncio.create_task(self.read(s))
        if self._reading is not None and not self._reading.done():
            await asyncio.wait({self._reading}, timeout=WAIT_S)

    async def read(self, s: Services) -> None:
        await asyncio.gather(self._shards(s), self._vouchers(s))

    async def _shards(self, s: Services) -> None:
        since = time.time() - AFTER_END_S
        items = [item for item in s.catalog.live_items() if item.ends_at > since]
        places = [(item.id, k) for item in items for k in range(item.shards)]
        wanted = {(str(item_id), str(k)) for item_id, k in places}
        for gone in self._exported - wanted:
            metrics.SHARD_STOCK.remove(*gone)
        self._exported &= wanted
        if not places:
            return
        pipe = s.router.client.pipeline()
        for item_id, k in places:
            pipe.execute_command("GET", shard_keys(item_id, k).stock)
        with contextlib.suppress(Exception):  # Redis silent: the gauges keep their last values
            values = await with_deadline(pipe.execute(raise_on_error=False))
            for (item_id, k), value in zip(places, values, strict=True):
                if isinstance(value, bytes | int):  # not an error, not a missing key
                    metrics.SHARD_STOCK.labels(str(item_id), str(k)).set(int(value))
                    self._exported.add((str(item_id), str(k)))

    async def _vouchers(self, s: Services) -> None:
        gate = asyncio.Semaphore(CONCURRENCY)

        async def read(code: str) -> None:
            async with gate:
                with contextlib.suppress(Exception):
                    remaining = (await s.voucher_store.state(code)).remaining
                    metrics.VOUCHER_REMAINING.labels(code).set(remaining or 0)

        await asyncio.gather(*(read(v.code) for v in s.vouchers.live_flash()))


STOCK = StockGauges()
