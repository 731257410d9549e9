"""The gateway's long-lived dependencies, built once per process at start-up."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import asyncpg

from gateway.auth import TokenVerifier
from gateway.handoff import HandOff
from gateway.items import ItemCatalog
from gateway.out_of_stock import OutOfStockFlags
from gateway.outbox import run_relay
from gateway.outboxes import ItemShard, ShardsAndBuyer, order_outbox, voucher_outbox
from gateway.producer import OrderProducer
from gateway.ratelimit import TokenBuckets
from gateway.soldout import SoldOutFlags, keep_fresh, listen
from gateway.voucher_catalog import VoucherCatalog
from kernel.settings import Settings
from shard_router import ShardRouter, VoucherStore


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
    inflight: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

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
        )
        await catalog.refresh()
        stop = services.stop
        services.tasks = [
            asyncio.create_task(catalog.run(stop)),
            asyncio.create_task(listen(flags, cfg.redis_nodes, stop)),
            asyncio.create_task(keep_fresh(flags, router, catalog, stop)),
            asyncio.create_task(run_relay(cfg, orders, producer, stop)),
            asyncio.create_task(vouchers.run(stop)),
            asyncio.create_task(run_relay(cfg, voucher_uses, producer, stop)),
        ]
        return services

    async def close(self) -> None:
        self.stop.set()
        for task in self.tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.producer.close()
        await self.router.close()
        await self.pool.close()
