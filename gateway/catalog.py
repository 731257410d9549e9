"""Item and sale configuration, cached in process and refreshed in the background, so the hot
path reads a dict, not the database."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from kernel.periodic import run_every

log = logging.getLogger(__name__)

_SELECT = """
select i.id, i.sale_id, i.shards, i.quantity, i.price, i.paused,
       extract(epoch from s.starts_at)::float8 as starts_at,
       extract(epoch from s.ends_at)::float8 as ends_at,
       s.payment_window_seconds, s.armed_at is not null as armed
from flash_sale_item i join flash_sale s on s.id = i.sale_id
"""


class CatalogUnavailable(Exception):
    """An item not in the cache could not be read from the database."""


@dataclass(frozen=True, slots=True)
class Item:
    id: int
    sale_id: int
    shards: int
    quantity: int
    price: int
    paused: bool
    starts_at: float
    ends_at: float
    payment_window_s: int
    armed: bool

    def is_open(self, now: float) -> bool:
        return self.armed and not self.paused and self.starts_at <= now < self.ends_at


def _item(row: asyncpg.Record) -> Item:
    return Item(
        row["id"],
        row["sale_id"],
        row["shards"],
        row["quantity"],
        row["price"],
        row["paused"],
        row["starts_at"],
        row["ends_at"],
        row["payment_window_seconds"],
        row["armed"],
    )


class Catalog:
    def __init__(self, pool: asyncpg.Pool, refresh_s: float) -> None:
        self.pool = pool
        self.refresh_s = refresh_s
        self._items: dict[int, Item] = {}
        self._missing: dict[int, float] = {}  # negative cache: unknown ids don't hit the DB
        self.on_refresh: list[Callable[[], None]] = []  # told after every refresh

    def cached(self, item_id: int) -> Item | None:
        return self._items.get(item_id)

    async def get(self, item_id: int) -> Item | None:
        item = self._items.get(item_id)
        if item is not None:
            return item
        now = time.monotonic()
        if self._missing.get(item_id, 0.0) > now:
            return None
        try:
            row = await self.pool.fetchrow(_SELECT + " where i.id = $1", item_id)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise CatalogUnavailable(str(exc)) from exc
        if row is None:
            if len(self._missing) > 100_000:
                self._missing.clear()
            self._missing[item_id] = now + self.refresh_s
            return None
        item = _item(row)
        self._items[item_id] = item
        return item

    def live_items(self) -> list[Item]:
        now = time.time()
        return [i for i in self._items.values() if i.armed and i.ends_at > now - 3600]

    def relay_items(self) -> list[Item]:
        """Items whose outboxes may still hold orders: open sales, and sales that closed less
        than a payment window ago (a hold outlives its sale by at most that)."""
        now = time.time()
        return [
            i
            for i in self._items.values()
            if i.armed and i.starts_at <= now < i.ends_at + i.payment_window_s
        ]

    async def refresh(self) -> None:
        rows = await self.pool.fetch(_SELECT + " where s.ends_at > now() - interval '1 day'")
        fresh = {row["id"]: _item(row) for row in rows}
        self._items.update(fresh)
        self._missing = {k: v for k, v in self._missing.items() if k not in fresh}
        for listener in self.on_refresh:
            listener()

    async def run(self, stop: asyncio.Event) -> None:
        # A failed refresh keeps serving from the cache.
        await run_every(self.refresh_s, self.refresh, stop, "catalog refresh")
