"""The stock gauges read and export the shards of sales open or just ended, and drop the series
of an item once its sale has been over for AFTER_END_S. (Fakes for the catalog and Redis.)"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any, cast

from gateway import metrics
from gateway.items import Item
from gateway.services import Services
from gateway.stock_gauges import AFTER_END_S, StockGauges
from shard_router import shard_keys


def _item(item_id: int, ends_in_s: float, shards: int = 2) -> Item:
    now = time.time()
    return Item(item_id, 1, shards, 10, 100, False, now - 3600, now + ends_in_s, 900, True)


class FakePipeline:
    def __init__(self, stock: dict[str, int], asked: list[str]) -> None:
        self.stock, self.asked, self.keys = stock, asked, list[str]()

    def execute_command(self, *args: Any) -> None:
        self.keys.append(args[1])

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        self.asked.extend(self.keys)
        return [self.stock.get(k) for k in self.keys]


class FakeServices:
    def __init__(self, items: list[Item]) -> None:
        self.items = items
        self.asked: list[str] = []
        stock = {shard_keys(i.id, k).stock: 7 for i in items for k in range(i.shards)}
        client = SimpleNamespace(pipeline=lambda: FakePipeline(stock, self.asked))
        self.router = SimpleNamespace(client=client)
        self.catalog = SimpleNamespace(live_items=lambda: self.items)


def _series() -> set[tuple[str, str]]:
    return {
        (sample.labels["item"], sample.labels["shard"])
        for family in metrics.SHARD_STOCK.collect()
        for sample in family.samples
    }


def test_only_open_and_just_ended_sales_are_read_and_exported() -> None:
    open_item, just_ended, long_ended = (
        _item(90001, 600),
        _item(90002, -AFTER_END_S / 2),
        _item(90003, -AFTER_END_S * 2),
    )
    fake = FakeServices([open_item, just_ended, long_ended])
    gauges = StockGauges()
    asyncio.run(gauges._shards(cast(Services, fake)))  # noqa: SLF001
    assert fake.asked == [shard_keys(i, k).stock for i in (90001, 90002) for k in (0, 1)]
    ours = {s for s in _series() if s[0].startswith("900")}
    assert ours == {("90001", "0"), ("90001", "1"), ("90002", "0"), ("90002", "1")}

    # The just-ended sale's time runs out: its series go, the open one's stay.
    fake.items = [open_item, _item(90002, -AFTER_END_S * 2), long_ended]
    asyncio.run(gauges._shards(cast(Services, fake)))  # noqa: SLF001
    assert {s for s in _series() if s[0].startswith("900")} == {("90001", "0"), ("90001", "1")}
    fake.items = []
    asyncio.run(gauges._shards(cast(Services, fake)))  # noqa: SLF001
    assert {s for s in _series() if s[0].startswith("900")} == set()
