"""The flash vouchers' outbox in the gateway, as gateway/outbox.py is for orders.

``VoucherAcker`` drops entries whose event Kafka acknowledged, one HDEL per voucher per loop
tick. ``relay_vouchers_once`` re-sends entries older than the minimum age (a gateway died
between the Lua call and the ack, or the ack's outcome was unknown); the writer stores a
redemption once per orderId, so a re-send of an event that did reach Kafka is harmless.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict

import msgspec

from flashsale.config import Settings
from flashsale.events import VoucherReserved, decode
from flashsale.periodic import run_every
from shard_router.vouchers import VoucherStore

from .metrics import RELAYED
from .producer import OrderProducer
from .voucher_catalog import VoucherCatalog

log = logging.getLogger(__name__)


class VoucherAcker:
    def __init__(self, store: VoucherStore) -> None:
        self.store = store
        self._pending: dict[str, list[str]] = defaultdict(list)
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    def ack(self, code: str, order_id: str) -> None:
        self._pending[code].append(order_id)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, defaultdict(list)
        for code, order_ids in pending.items():
            task = asyncio.ensure_future(self._send(code, order_ids))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, code: str, order_ids: list[str]) -> None:
        try:
            await self.store.ack_outbox(code, order_ids)
        except Exception as exc:  # noqa: BLE001 - the relay re-sends; the writer dedups
            log.warning("voucher outbox ack failed for %s: %s", code, exc)


async def relay_vouchers_once(
    cfg: Settings,
    store: VoucherStore,
    catalog: VoucherCatalog,
    producer: OrderProducer,
    acker: VoucherAcker,
) -> int:
    """Re-send every outbox entry older than the minimum age; returns how many were sent."""
    cutoff_ms = time.time() * 1000 - cfg.outbox_relay_min_age_ms
    sent = 0
    for voucher in catalog.live_flash():
        for order_id, payload in (await store.outbox(voucher.code)).items():
            try:
                event = decode(payload)
            except msgspec.MsgspecError:
                continue  # not ours to judge: reconciliation reports it
            if not isinstance(event, VoucherReserved) or event.reserved_at_ms > cutoff_ms:
                continue
            await producer.send(cfg.vouchers_topic, order_id.encode(), payload)
            acker.ack(voucher.code, order_id)
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
    await run_every(
        cfg.outbox_relay_interval_ms / 1000,
        lambda: relay_vouchers_once(cfg, store, catalog, producer, acker),
        stop,
        "voucher outbox relay round",
    )
