"""The flash vouchers' outbox in the gateway, as gateway/outbox.py is for orders.

``VoucherAcker`` drops entries whose event Kafka acknowledged, one HDEL per voucher per loop
tick. ``relay_vouchers_once`` re-sends entries older than the minimum age (a gateway died
between the Lua call and the ack, or the ack's outcome was unknown); the writer stores a
redemption once per orderId, so a re-send of an event that did reach Kafka is harmless.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec

from gateway.acks import BatchedAcks
from gateway.metrics import RELAYED
from gateway.producer import OrderProducer
from gateway.voucher_catalog import VoucherCatalog
from kernel.events import VoucherReserved, decode
from kernel.periodic import run_every
from kernel.round_robin import RoundRobin
from kernel.settings import Settings
from shard_router.vouchers import VoucherStore


class VoucherAcker(BatchedAcks[str]):
    def __init__(self, store: VoucherStore) -> None:
        super().__init__("voucher outbox ack")
        self.store = store

    def ack(self, code: str, order_id: str) -> None:
        self._queue(code, order_id)

    def _send(self, key: str, order_ids: list[str]) -> asyncio.Future[Any]:
        return self.store.ack_outbox(key, order_ids)


async def relay_vouchers_once(
    cfg: Settings,
    store: VoucherStore,
    catalog: VoucherCatalog,
    producer: OrderProducer,
    acker: VoucherAcker,
    scan: RoundRobin[str],
) -> int:
    """Re-send every entry older than the minimum age in this round's share of the outboxes;
    returns how many were sent."""
    cutoff_ms = time.time() * 1000 - cfg.outbox_relay_min_age_ms
    sent = 0
    codes = [voucher.code for voucher in catalog.live_flash()]
    for code in await store.outboxes_in_use(scan.take(codes)):
        for order_id, payload in (await store.outbox(code)).items():
            try:
                event = decode(payload)
            except msgspec.MsgspecError:
                continue  # not ours to judge: reconciliation reports it
            if not isinstance(event, VoucherReserved) or event.reserved_at_ms > cutoff_ms:
                continue
            await producer.send(cfg.vouchers_topic, order_id.encode(), payload)
            acker.ack(code, order_id)
            sent += 1
    RELAYED.inc(sent)
    return sent


async def run_voucher_relay(
    cfg: Settings,
    store: VoucherStore,
    catalog: VoucherCatalog,
    producer: OrderProducer,
    acker: VoucherAcker,
    stop: asyncio.Event,
) -> None:
    scan = RoundRobin[str](cfg.outbox_relay_scan_budget)
    await run_every(
        cfg.outbox_relay_interval_ms / 1000,
        lambda: relay_vouchers_once(cfg, store, catalog, producer, acker, scan),
        stop,
        "voucher outbox relay round",
    )
