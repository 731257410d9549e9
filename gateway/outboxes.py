"""The gateway's two outboxes (gateway/outbox.py), each with its hand-off (gateway/handoff.py):
orders, one hash per item shard; flash-voucher uses, one hash per code."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from gateway.handoff import HandOff
from gateway.items import ItemCatalog
from gateway.outbox import Outbox
from gateway.producer import OrderProducer
from gateway.voucher_catalog import VoucherCatalog
from kernel.events import OrderPlaced, VoucherReserved
from kernel.settings import Settings
from shard_router import ShardRouter, VoucherStore

ItemShard = tuple[int, int]  # (item id, shard)
ShardsAndBuyer = tuple[int, int]  # (the item's shard count, user id)
# Each outbox with its hand-off:
OrderOutbox = tuple[Outbox[ItemShard, OrderPlaced], HandOff[ItemShard, ShardsAndBuyer]]
VoucherOutbox = tuple[Outbox[str, VoucherReserved], HandOff[str, None]]


class _ItemShards:
    """The router's outbox calls with an item shard as one place (VoucherStore's take a code)."""

    def __init__(self, router: ShardRouter) -> None:
        self._router = router

    async def outboxes_in_use(self, places: list[ItemShard], /) -> list[ItemShard]:
        return await self._router.outboxes_in_use(places)

    async def outbox(self, place: ItemShard, /) -> Mapping[str, bytes]:
        return await self._router.outbox(*place)

    def ack_outbox(self, place: ItemShard, order_ids: list[str], /) -> asyncio.Future[Any]:
        return self._router.ack_outbox(*place, order_ids)

    async def give_back(self, place: ItemShard, order_id: str, owner: ShardsAndBuyer) -> bool:
        (item_id, unit_shard), (shards, user_id) = place, owner
        return await self._router.release(item_id, shards, unit_shard, user_id, order_id)


def order_outbox(
    cfg: Settings, router: ShardRouter, items: ItemCatalog, producer: OrderProducer
) -> OrderOutbox:
    def places() -> list[ItemShard]:
        return [(item.id, k) for item in items.relay_items() for k in range(item.shards)]

    shards = _ItemShards(router)
    outbox = Outbox("outbox", cfg.orders_topic, shards, places, OrderPlaced)
    return outbox, HandOff("order", outbox, producer, shards.give_back)


def voucher_outbox(
    cfg: Settings, store: VoucherStore, vouchers: VoucherCatalog, producer: OrderProducer
) -> VoucherOutbox:
    async def give_back(code: str, order_id: str, _: None) -> bool:
        # Not ended: the caller's retry with the same orderId may take a use again.
        return await store.release(code, order_id, ended=False)

    outbox = Outbox(
        "voucher outbox",
        cfg.vouchers_topic,
        store,
        lambda: [voucher.code for voucher in vouchers.live_flash()],
        VoucherReserved,
    )
    return outbox, HandOff("voucher use", outbox, producer, give_back)
