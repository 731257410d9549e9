"""The outbox's two halves in the gateway.

``OutboxAcker`` drops entries whose order Kafka acknowledged, batched: one HDEL per shard per
loop tick. ``relay`` re-sends entries that stayed too long (a gateway died between the Lua call
and the ack, or the ack's outcome was unknown); the writer deduplicates by orderId, so a re-send
of an order that did reach Kafka is harmless.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec

from gateway.acks import BatchedAcks
from gateway.catalog import Catalog
from gateway.metrics import RELAYED
from gateway.producer import OrderProducer
from kernel.events import OrderPlaced, decode
from kernel.periodic import run_every
from kernel.round_robin import RoundRobin
from kernel.settings import Settings
from shard_router import ShardRouter


class OutboxAcker(BatchedAcks[tuple[int, int]]):
    def __init__(self, router: ShardRouter) -> None:
        super().__init__("outbox ack")
        self.router = router

    def ack(self, item_id: int, shard: int, order_id: str) -> None:
        self._queue((item_id, shard), order_id)

    def _send(self, key: tuple[int, int], order_ids: list[str]) -> asyncio.Future[Any]:
        return self.router.ack_outbox(key[0], key[1], order_ids)


async def relay_once(
    cfg: Settings,
    router: ShardRouter,
    catalog: Catalog,
    producer: OrderProducer,
    acker: OutboxAcker,
    scan: RoundRobin[tuple[int, int]],
) -> int:
    """Re-send every entry older than the minimum age in this round's share of the outboxes;
    returns how many were sent."""
    cutoff_ms = time.time() * 1000 - cfg.outbox_relay_min_age_ms
    sent = 0
    shards = [(item.id, k) for item in catalog.relay_items() for k in range(item.shards)]
    for item_id, shard in await router.outboxes_in_use(scan.take(shards)):
        for order_id, payload in (await router.outbox(item_id, shard)).items():
            try:
                event = decode(payload)
            except msgspec.MsgspecError:
                continue  # not ours to judge: reconciliation reports it
            if not isinstance(event, OrderPlaced) or event.created_at_ms > cutoff_ms:
                continue
            await producer.send(cfg.orders_topic, order_id.encode(), payload)
            acker.ack(item_id, shard, order_id)
            sent += 1
    RELAYED.inc(sent)
    return sent


async def run_relay(
    cfg: Settings,
    router: ShardRouter,
    catalog: Catalog,
    producer: OrderProducer,
    acker: OutboxAcker,
    stop: asyncio.Event,
) -> None:
    scan = RoundRobin[tuple[int, int]](cfg.outbox_relay_scan_budget)
    await run_every(
        cfg.outbox_relay_interval_ms / 1000,
        lambda: relay_once(cfg, router, catalog, producer, acker, scan),
        stop,
        "outbox relay round",
    )
