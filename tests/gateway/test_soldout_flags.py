"""The sold-out flags' path index, which the front answers 410 from: only open, flagged items
are in it, never past the sale's end, and it follows the catalog; the re-check keeps open items'
flags and drops ended ones'."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from types import SimpleNamespace
from typing import cast

from gateway.items import Item, ItemCatalog
from gateway.paths import purchase_path
from gateway.soldout import SoldOutFlags, keep_fresh
from shard_router import ShardRouter


def _item(item_id: int, *, ends_in_s: float = 3600, starts_in_s: float = -10) -> Item:
    now = time.time()
    return Item(item_id, 1, 4, 100, 1000, False, now + starts_in_s, now + ends_in_s, 600, True)


def test_a_flagged_open_item_is_indexed_until_its_flag_ends() -> None:
    items = {1: _item(1)}
    flags = SoldOutFlags(5.0, items.get)
    flags.mark(1)
    until = flags.by_path[purchase_path(1)]
    assert time.monotonic() + 4.0 < until <= time.monotonic() + 5.0
    flags.clear(1)
    assert purchase_path(1) not in flags.by_path


def test_the_deadline_never_passes_the_sales_end() -> None:
    items = {2: _item(2, ends_in_s=1.0)}
    flags = SoldOutFlags(60.0, items.get)
    flags.mark(2)
    assert flags.by_path[purchase_path(2)] <= time.monotonic() + 1.0


def test_items_not_open_or_unknown_are_not_indexed() -> None:
    items = {3: _item(3, starts_in_s=60), 4: dataclasses.replace(_item(4), paused=True)}
    flags = SoldOutFlags(5.0, items.get)
    for item_id in (3, 4, 5):
        flags.mark(item_id)
        assert flags.is_sold_out(item_id)  # the flag itself stands: the slow path decides
        assert purchase_path(item_id) not in flags.by_path


def test_revalidate_follows_the_catalog() -> None:
    items = {6: _item(6)}
    flags = SoldOutFlags(5.0, items.get)
    flags.mark(6)
    items[6] = dataclasses.replace(items[6], paused=True)
    flags.revalidate()
    assert purchase_path(6) not in flags.by_path
    items[6] = dataclasses.replace(items[6], paused=False)
    flags.revalidate()
    assert purchase_path(6) in flags.by_path


class _Router:
    def __init__(self) -> None:
        self.asked: list[int] = []

    async def units_left(self, item_id: int, shards: int) -> int:
        self.asked.append(item_id)
        return 0


def test_keep_fresh_rechecks_open_items_and_drops_ended_ones_unasked() -> None:
    items = {7: _item(7), 8: _item(8, ends_in_s=-5)}  # open, and ended 5 s ago
    flags = SoldOutFlags(5.0, items.get)
    router = _Router()
    catalog = SimpleNamespace(cached=items.get)

    async def one_round() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(
            keep_fresh(flags, cast(ShardRouter, router), cast(ItemCatalog, catalog), stop)
        )
        while not router.asked:  # the round has run (it asks about the open item)
            await asyncio.sleep(0.001)
        stop.set()
        await task

    flags.mark(7)
    flags.mark(8)
    asyncio.run(asyncio.wait_for(one_round(), 5))
    assert router.asked == [7]  # the ended sale's item: not asked about
    assert flags.is_sold_out(7) and not flags.is_sold_out(8)
    assert flags.flagged() == [7]
