"""Fixtures that reach the real local stack, starting it when it is not up."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
from redis.asyncio.cluster import ClusterNode, RedisCluster

from flashsale import stack
from flashsale.migrate import migrate
from kernel.settings import Settings, settings
from shard_router import ShardRouter, VoucherStore


@pytest.fixture(scope="session")
def cfg() -> Settings:
    return settings()


@pytest.fixture(scope="session")
def live_stack(cfg: Settings) -> Iterator[Settings]:
    """The stack, started if needed (idempotent), with migrations applied."""
    stack.up(cfg, quiet=True)
    migrate(cfg)
    yield cfg


@pytest.fixture
async def redis(live_stack: Settings) -> AsyncIterator[RedisCluster]:
    nodes = [ClusterNode(*a.rsplit(":", 1)) for a in live_stack.redis_nodes]
    client = RedisCluster(startup_nodes=nodes, decode_responses=False)
    await client.initialize()
    yield client
    await client.aclose()


@pytest.fixture
async def db(live_stack: Settings) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(live_stack.pg_dsn, min_size=1, max_size=10)
    assert pool is not None
    yield pool
    await pool.close()


@pytest.fixture
async def router(live_stack: Settings) -> AsyncIterator[ShardRouter]:
    r = ShardRouter(live_stack)
    await r.start()
    yield r
    await r.close()


@pytest.fixture
def voucher_store(router: ShardRouter) -> VoucherStore:
    return VoucherStore(router)
