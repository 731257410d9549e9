"""Fixtures that reach the real local stack, starting it when it is not up, and the tiers: a
test that uses one of them is marked ``integration`` (tests/support/tiers.py). Under
pytest-xdist each worker has a stack of its own (tests/support/workers.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
from redis.asyncio.cluster import ClusterNode, RedisCluster
from xdist.remote import Producer

from flashsale import stack
from flashsale.migrate import migrate
from kernel.settings import Settings, settings
from shard_router import ShardRouter, VoucherStore
from tests.support.scheduling import RowsOnFirstWorker
from tests.support.tiers import mark_by_fixtures, refuse_stack_connections, server_fixture
from tests.support.workers import schedule_by_module, this_worker


@pytest.hookimpl(optionalhook=True)  # xdist's hook: without xdist (-p no:xdist) there is none
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> RowsOnFirstWorker | None:
    return RowsOnFirstWorker(config, log) if config.getvalue("dist") == "loadgroup" else None


@pytest.hookimpl(tryfirst=True)  # before xdist's, which puts the group in the nodeid
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_by_fixtures(items)
    schedule_by_module(items)


@pytest.fixture(autouse=True)
def _fast_tier_stays_off_the_stack(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("integration") is not None:
        yield
        return
    with refuse_stack_connections(settings()):
        yield


@pytest.fixture(scope="session")
def cfg() -> Settings:
    return settings()


@server_fixture(scope="session")
def live_stack(cfg: Settings) -> Iterator[Settings]:
    """The stack, started if needed (idempotent), with migrations applied. A worker's own stack
    (not the first worker's, which is the one `flashsale stack up` starts) is stopped at the
    end of the session that started it."""
    started_here = this_worker() > 0 and not stack.running(cfg)
    stack.up(cfg, quiet=True)
    migrate(cfg)
    yield cfg
    if started_here:
        stack.down(cfg)


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
