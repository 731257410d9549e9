"""The gateway's long-lived dependencies, built once per process at start-up, and closed in the
order that leaves nothing half done."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import asyncpg

from gateway.auth import TokenVerifier
from gateway.handoff import HandOff
from gateway.items import ItemCatalog
from gateway.out_of_stock import OutOfStockFlags
from gateway.outbox import Outbox, run_relay
from gateway.outboxes import ItemShard, ShardsAndBuyer, order_outbox, voucher_outbox
from gateway.producer import OrderProducer
from gateway.ratelimit import TokenBuckets
from gateway.soldout import SoldOutFlags, keep_fresh, listen
from gateway.voucher_catalog import VoucherCatalog
from kernel import tracing
from kernel.settings import Settings
from shard_router import ShardRouter, VoucherStore

if TYPE_CHECKING:  # the annotation only: with tracing off, OpenTelemetry is never imported
    from kernel.otel import Tracer

log = logging.getLogger(__name__)

# On top of a request's deadline (its Redis calls', then the Kafka acknowledgement's), for what
# is in flight at close: a loop turn or two on a busy box.
_CLOSE_SLACK_S = 1.0
_POLL_S = 0.01


@dataclass
class Services:
    cfg: Settings
    pool: asyncpg.Pool
    catalog: ItemCatalog
    router: ShardRouter
    producer: OrderProducer
    order_hand_off: HandOff[ItemShard, ShardsAndBuyer]
    flags: SoldOutFlags
    verifier: TokenVerifier
    user_buckets: TokenBuckets
    ip_buckets: TokenBuckets
    vouchers: VoucherCatalog
    voucher_store: VoucherStore
    voucher_hand_off: HandOff[str, None]
    voucher_flags: OutOfStockFlags
    outboxes: tuple[Outbox[Any, Any], ...] = ()
    tracer: Tracer | None = None  # None: tracing off (FLASHSALE_OTEL_EXPORTER=none)
    inflight: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)  # cancelled at close
    relays: list[asyncio.Task[None]] = field(default_factory=list)  # end between rounds

    @classmethod
    async def start(cls, cfg: Settings) -> Services:
        pool = await asyncpg.create_pool(cfg.pg_dsn, min_size=1, max_size=8)
        assert pool is not None
        router = ShardRouter(cfg)
        await router.start()
        voucher_store = VoucherStore(router)
        producer = OrderProducer(cfg)
        producer.start()
        catalog = ItemCatalog(pool, cfg.item_cache_seconds)
        vouchers = VoucherCatalog(pool, cfg.item_cache_seconds)
        orders, order_hand_off = order_outbox(cfg, router, catalog, producer)
        voucher_uses, voucher_hand_off = voucher_outbox(cfg, voucher_store, vouchers, producer)
        flags = SoldOutFlags(cfg.sold_out_flag_ttl_ms / 1000, catalog.cached)
        catalog.on_refresh.append(flags.revalidate)
        services = cls(
            cfg=cfg,
            pool=pool,
            catalog=catalog,
            router=router,
            producer=producer,
            order_hand_off=order_hand_off,
            flags=flags,
            verifier=TokenVerifier(cfg),
            user_buckets=TokenBuckets(cfg.user_rate_per_s, cfg.user_burst),
            ip_buckets=TokenBuckets(cfg.ip_rate_per_s, cfg.ip_burst),
            vouchers=vouchers,
            voucher_store=voucher_store,
            voucher_hand_off=voucher_hand_off,
            voucher_flags=OutOfStockFlags(cfg.sold_out_flag_ttl_ms / 1000),
            outboxes=(orders, voucher_uses),
            tracer=tracing.start(cfg, "flashsale-gateway"),
        )
        await catalog.refresh()
        stop = services.stop
        services.tasks = [
            asyncio.create_task(catalog.run(stop)),
            asyncio.create_task(listen(flags, cfg.redis_nodes, stop)),
            asyncio.create_task(keep_fresh(flags, router, catalog, stop)),
            asyncio.create_task(vouchers.run(stop)),
        ]
        services.relays = [
            asyncio.create_task(run_relay(cfg, orders, producer, stop)),
            asyncio.create_task(run_relay(cfg, voucher_uses, producer, stop)),
        ]
        return services

    async def close(self) -> None:
        """Stop, nothing half done: the reservations in flight finish (granian has waited for
        every connection, but a handler whose client went away may still run), the relays end
        between rounds (a round's re-sends get their acks; the other loops hold nothing and are
        cancelled), the queued outbox acks are written, the producer flushes; then the
        connections close."""
        started = time.monotonic()
        budget_s = (self.cfg.redis_timeout_ms + self.cfg.kafka_timeout_ms) / 1000 + _CLOSE_SLACK_S
        finished = await _until(lambda: self.inflight == 0, budget_s)
        self.stop.set()
        for task in self.tasks:
            task.cancel()
        if self.relays:
            _, late = await asyncio.wait(self.relays, timeout=budget_s)
            for task in late:
                task.cancel()
        await asyncio.gather(*self.tasks, *self.relays, return_exceptions=True)
        left = await self._acks_written()
        await self.producer.close()
        await self.router.close()
        await self.pool.close()
        if self.tracer is not None:  # its last spans exported
            await asyncio.to_thread(self.tracer.close)
        log.info(
            "closed in %.2f s: %s; %d live outboxes hold entries (the relays re-send them)",
            time.monotonic() - started,
            "every reservation finished" if finished else f"{self.inflight} reservations cut",
            left,
        )

    async def _acks_written(self) -> int:
        """Wait until the outbox acks queued so far are written; returns how many outboxes still
        hold entries. The acks go out on the auto-pipeline, each on its node's connection, whose
        replies come in order: an HLEN of every outbox sent after them is answered after them."""
        await asyncio.sleep(0)  # BatchedAcks hands its acks to the pipeline on the next tick
        left = 0
        for outbox in self.outboxes:
            try:
                left += len(await outbox.store.outboxes_in_use(outbox.places()))
            except Exception as exc:  # noqa: BLE001 - the relays re-send what stays
                log.warning("%s acks at close: %s", outbox.name, exc)
        return left


async def _until(done: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(_POLL_S)
    return True
