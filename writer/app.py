"""Wires one writer process: settings in, a running OrderWriter out, everything closed after."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

import asyncpg
import uvloop

from flashsale.config import Settings
from shard_router import ShardRouter

from . import metrics
from .consumer import OrderWriter, WriterStats
from .deadletter import DeadLetterProducer
from .errors import WriterError
from .metrics import METRICS_PORT
from .retry import Backoff, redis_retriable, retrying
from .sink import Sink
from .source import OrderSource

log = logging.getLogger(__name__)

POOL_SIZE = 2
COMMAND_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 5.0


async def run(
    cfg: Settings,
    *,
    stop: asyncio.Event | None = None,
    metrics_port: int | None = METRICS_PORT,
    once: bool = False,
    stats: WriterStats | None = None,
) -> None:
    """Write orders until ``stop`` is set (or, with ``once``, until the topic is drained).

    ``metrics_port=None`` serves no metrics; 0 picks a free port. Raises WriterError when a step
    keeps failing past its retry budget.
    """
    stop = stop or asyncio.Event()
    backoff = Backoff()
    async with contextlib.AsyncExitStack() as resources:
        if metrics_port is not None:
            server = metrics.serve(metrics_port, cfg.metrics_host)
            resources.callback(server.server_close)
            resources.callback(server.shutdown)
        router = ShardRouter(cfg)
        resources.push_async_callback(router.close)
        await retrying("redis", router.start, redis_retriable, backoff)
        # min_size=0: no connection at start, so PostgreSQL being down is the first batch's
        # problem, handled by its retries like any other outage.
        pool = await asyncpg.create_pool(
            cfg.pg_dsn, min_size=0, max_size=POOL_SIZE, command_timeout=COMMAND_TIMEOUT_S
        )
        resources.push_async_callback(_close_pool, pool)
        deadletter = DeadLetterProducer(cfg)
        resources.push_async_callback(asyncio.to_thread, deadletter.close)
        source = OrderSource(cfg)
        resources.push_async_callback(source.close)
        writer = OrderWriter(source, Sink(pool), deadletter, router, backoff=backoff, stats=stats)
        log.info("writer: %s -> PostgreSQL, group %s", cfg.orders_topic, cfg.writer_group)
        await writer.run(stop, once=once)


async def _close_pool(pool: asyncpg.Pool) -> None:
    try:
        await asyncio.wait_for(pool.close(), CLOSE_TIMEOUT_S)
    except TimeoutError:
        pool.terminate()


def main(cfg: Settings, once: bool = False, *, metrics_port: int | None = METRICS_PORT) -> int:
    """Run a writer on uvloop until SIGINT/SIGTERM (or drained, with ``once``); exit status."""

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run(cfg, stop=stop, metrics_port=metrics_port, once=once)

    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve())
    except WriterError as exc:
        log.error("writer stopped: %s", exc)
        return 1
    return 0
