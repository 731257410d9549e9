"""The gateway's long-lived dependencies, built once per process at start-up."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import asyncpg

from gateway.auth import TokenVerifier
from gateway.catalog import Catalog
from gateway.outbox import OutboxAcker, run_relay
from gateway.producer import OrderProducer
from gateway.ratelimit import TokenBuckets
from gateway.soldout import SoldOutFlags, keep_fresh, listen
from gateway.voucher_catalog import OutOfStockFlags, VoucherCatalog
from gateway.voucher_outbox import VoucherAcker, run_voucher_relay
from kernel.settings import Settings
from shard_router import ShardRouter, VoucherStore


@dataclass
class Services:
    cfg: Settings
    pool: asyncpg.Pool
    catalog: Catalog
    router: ShardRouter
    producer: OrderProducer
    acker: OutboxAcker
    flags: SoldOutFlags
    verifier: TokenVerifier
    user_buckets: TokenBuckets
    ip_buckets: TokenBuckets
    vouchers: VoucherCatalog
    voucher_store: VoucherStore
    voucher_acker: VoucherAcker
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
        catalog = Catalog(pool, cfg.item_cache_seconds)
        flags = SoldOutFlags(cfg.sold_out_flag_ttl_ms / 1000, catalog.cached)
        catalog.on_refresh.append(flags.revalidate)
        services = cls(
            cfg=cfg,
            pool=pool,
            catalog=catalog,
            router=router,
            producer=OrderProducer(cfg),
            acker=OutboxAcker(router),
            flags=flags,
            verifier=TokenVerifier(cfg),
            user_buckets=TokenBuckets(cfg.user_rate_per_s, cfg.user_burst),
            ip_buckets=TokenBuckets(cfg.ip_rate_per_s, cfg.ip_burst),
            vouchers=VoucherCatalog(pool, cfg.item_cache_seconds),
            voucher_store=voucher_store,
            voucher_acker=VoucherAcker(voucher_store),
            voucher_flags=OutOfStockFlags(cfg.sold_out_flag_ttl_ms / 1000),
        )
        await services.catalog.refresh()
        services.tasks = [
            asyncio.create_task(services.catalog.run(services.stop)),
            asyncio.create_task(listen(services.flags, cfg.redis_nodes, services.stop)),
            asyncio.create_task(
                keep_fresh(services.flags, router, services.catalog, services.stop)
            ),
            asyncio.create_task(
                run_relay(
                    cfg, router, services.catalog, services.producer, services.acker, services.stop
                )
            ),
            asyncio.create_task(services.vouchers.run(services.stop)),
            asyncio.create_task(
                run_voucher_relay(
                    cfg,
                    voucher_store,
                    services.vouchers,
                    services.producer,
                    services.voucher_acker,
                    services.stop,
                )
            ),
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
