"""A table's rows cached in process, so a hot path reads a dict, not the database. One mechanism
for every catalog (items, vouchers); a ``CatalogQuery`` says what it reads.

- A row is read on demand; a key the database does not have is remembered as missing for
  ``ttl_s``, so a flood of unknown keys does not reach the database, and concurrent misses of
  one key share one read. Every read is counted (``flashsale_catalog_reads_total``).
- The live rows (those the background jobs walk) are re-read every ``ttl_s``, so a change to
  one (a paused item, a rescheduled sale) shows within that. A failed refresh keeps serving
  from the cache.
- Bounded: past ``max_rows`` rows, or as many missing keys, that part starts over.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import asyncpg
from prometheus_client import Counter

from gateway.metrics import REGISTRY
from kernel.periodic import run_every

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


READS = Counter(
    "flashsale_catalog_reads_total",
    "Rows a catalog read from the database on a miss",
    ["catalog"],
    registry=REGISTRY,
)


class CatalogUnavailable(Exception):
    """A row not in the cache could not be read from the database. Not an ApiError: each
    caller answers it (the purchase 503, a Starlette route through gateway/exception_map.py)."""


@dataclass(frozen=True, slots=True)
class CatalogQuery(Generic[K, V]):
    one: str  # the row whose key is $1
    live: str  # the live rows
    row: Callable[[asyncpg.Record], V]
    key: Callable[[V], K]
    is_live: Callable[[V], bool]  # does a row read between two refreshes join the live ones?


class Catalog(Generic[K, V]):
    def __init__(
        self,
        pool: asyncpg.Pool,
        query: CatalogQuery[K, V],
        ttl_s: float,
        name: str,
        max_rows: int = 100_000,
    ) -> None:
        self.pool = pool
        self.query = query
        self.ttl_s = ttl_s
        self.name = name
        self.max_rows = max_rows
        self._rows: dict[K, V] = {}
        self._missing: dict[K, float] = {}  # key → when the database may be asked again
        self._live: dict[K, V] = {}
        self._reading: dict[K, asyncio.Future[V | None]] = {}  # misses being read now
        self._reads = READS.labels(name)
        self.on_refresh: list[Callable[[], None]] = []  # told after every refresh

    def cached(self, key: K) -> V | None:
        return self._rows.get(key)

    async def get(self, key: K) -> V | None:
        row = self._rows.get(key)
        if row is not None:
            return row
        if self._missing.get(key, 0.0) > time.monotonic():
            return None
        reading = self._reading.get(key)
        if reading is None:
            reading = asyncio.ensure_future(self._read(key))
            self._reading[key] = reading
            reading.add_done_callback(lambda _: self._reading.pop(key, None))
        return await asyncio.shield(reading)  # one caller's cancel does not end the others' read

    async def _read(self, key: K) -> V | None:
        self._reads.inc()
        try:
            record = await self.pool.fetchrow(self.query.one, key)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise CatalogUnavailable(str(exc)) from exc
        now = time.monotonic()
        if record is None:
            if len(self._missing) >= self.max_rows:
                self._missing.clear()
            self._missing[key] = now + self.ttl_s
            return None
        row = self.query.row(record)
        self.remember(row)
        return row

    def remember(self, row: V) -> None:
        """Cache a row just read or written (the admin API's create, say)."""
        if len(self._rows) >= self.max_rows:
            self._rows.clear()
        key = self.query.key(row)
        self._rows[key] = row
        self._missing.pop(key, None)
        if self.query.is_live(row):
            self._live[key] = row

    def live(self) -> list[V]:
        return list(self._live.values())

    async def refresh(self) -> None:
        rows = map(self.query.row, await self.pool.fetch(self.query.live))
        fresh = {self.query.key(row): row for row in rows}
        self._live = fresh
        self._rows.update(fresh)
        self._missing = {k: v for k, v in self._missing.items() if k not in fresh}
        for listener in self.on_refresh:
            listener()

    async def run(self, stop: asyncio.Event) -> None:
        await run_every(self.ttl_s, self.refresh, stop, f"{self.name} refresh")
