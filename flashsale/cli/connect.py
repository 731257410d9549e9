"""The stack's clients for one command: a PostgreSQL pool, and a shard router when the command
touches Redis; opened for the command and closed after it, on uvloop."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kernel.settings import Settings

if TYPE_CHECKING:
    from shard_router import ShardRouter

T = TypeVar("T")
CONNECT_TIMEOUT_S = 10  # a stopped PostgreSQL fails the command in seconds, not after a minute


async def _pool(cfg: Settings) -> Any:
    import asyncpg

    return await asyncpg.create_pool(cfg.pg_dsn, min_size=1, max_size=4, timeout=CONNECT_TIMEOUT_S)


def run_db(cfg: Settings, work: Callable[[Any], Awaitable[T]]) -> T:
    """``work(pool)`` with a database pool, closed afterwards."""
    import uvloop

    async def main() -> T:
        pool = await _pool(cfg)
        try:
            return await work(pool)
        finally:
            await pool.close()

    return uvloop.run(main())


def run_stack(cfg: Settings, work: Callable[[Any, ShardRouter], Awaitable[T]]) -> T:
    """``work(pool, router)`` with a database pool and a started shard router, both closed
    afterwards."""
    from shard_router import ShardRouter

    async def with_router(pool: Any) -> T:
        router = ShardRouter(cfg)
        await router.start()
        try:
            return await work(pool, router)
        finally:
            await router.close()

    return run_db(cfg, with_router)
