"""Flash-sale items as the gateway caches them (gateway/catalog.py): each item with its sale's
window, and which items the background jobs walk."""

from __future__ import annotations

import time
from dataclasses import dataclass

import asyncpg

from gateway.catalog import Catalog, CatalogQuery

_SELECT = """
select i.id, i.sale_id, i.shards, i.quantity, i.price, i.paused,
       extract(epoch from s.starts_at)::float8 as starts_at,
       extract(epoch from s.ends_at)::float8 as ends_at,
       s.payment_window_seconds as payment_window_s, s.armed_at is not null as armed,
       s.waiting_room
from flash_sale_item i join flash_sale s on s.id = i.sale_id
"""


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
    waiting_room: bool = False  # buying needs an admission (gateway/waiting_room/)

    def is_open(self, now: float) -> bool:
        return self.armed and not self.paused and self.starts_at <= now < self.ends_at


def _item(record: asyncpg.Record) -> Item:
    return Item(**record)  # the columns are named as the fields


_ITEMS: CatalogQuery[int, Item] = CatalogQuery(
    one=_SELECT + " where i.id = $1",
    live=_SELECT + " where s.ends_at > now() - interval '1 day'",
    row=_item,
    key=lambda item: item.id,
    is_live=lambda item: True,  # any, until the next refresh keeps the last day's sales only
)


class ItemCatalog(Catalog[int, Item]):
    def __init__(self, pool: asyncpg.Pool, refresh_s: float) -> None:
        super().__init__(pool, _ITEMS, refresh_s, "catalog")

    def live_items(self) -> list[Item]:
        """Items of armed sales that ended less than an hour ago, or have not: /metrics shows
        their shards."""
        now = time.time()
        return [i for i in self.live() if i.armed and i.ends_at > now - 3600]

    def relay_items(self) -> list[Item]:
        """Items whose outboxes may still hold orders: open sales, and sales that closed less
        than a payment window ago (a hold outlives its sale by at most that)."""
        now = time.time()
        return [
            i
            for i in self.live()
            if i.armed and i.starts_at <= now < i.ends_at + i.payment_window_s
        ]
