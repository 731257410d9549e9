"""Wires one writer process: settings in, running StreamWriters out (one per stream of
``writer_streams``: the orders topic, the vouchers topic), everything closed after."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

import asyncpg
import uvloop

from kernel import logs, tracing
from kernel.periodic import stopped_by_signals
from kernel.settings import Settings
from shard_router import ShardRouter
from writer import metrics
from writer.batch import E
from writer.consumer import StreamWriter, WriterStats
from writer.deadletter import DeadLetterProducer
from writer.errors import WriterError
from writer.metrics import METRICS_PORT
from writer.retry import Backoff, redis_retriable, retrying
from writer.sink import Sink
from writer.source import EventSource
from writer.stream import Stream
from writer.streams import ORDERS, VOUCHERS

log = logging.getLogger(__name__)

POOL_SIZE = 2
STREAMS = ("orders", "vouchers")
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
    """Write orders and voucher uses until ``stop`` is set (or, with ``once``, until every topic
    is drained).

    ``metrics_port=None`` serves no metrics; 0 picks a free port. ``stats`` counts the orders
    stream. Raises WriterError when a step keeps failing past its retry budget.
    """
    if not cfg.writer_streams or set(cfg.writer_streams) - set(STREAMS):
        raise SystemExit(
            f"FLASHSALE_WRITER_STREAMS={','.join(cfg.writer_streams)}: each one of {STREAMS}"
        )
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
        tracer = tracing.start(cfg, "flashsale-writer")
        if tracer is not None:  # closed after the loops end: their last spans exported
            resources.push_async_callback(asyncio.to_thread, tracer.close)

        def writer(
            stream: Stream[E, Any], topic: str, group: str, stats: WriterStats | None = None
        ) -> StreamWriter[E]:
            source = EventSource(cfg, topic, group)
            resources.push_async_callback(source.close)
            log.info("writer: %s -> PostgreSQL, group %s", topic, group)
            sink = Sink(pool, stream)
            return StreamWriter(
                source, sink, deadletter, router, backoff=backoff, stats=stats, tracer=tracer
            )

        writers: list[StreamWriter[Any]] = []
        if "orders" in cfg.writer_streams:
            writers.append(writer(ORDERS, cfg.orders_topic, cfg.writer_group, stats))
        if "vouchers" in cfg.writer_streams:
            writers.append(writer(VOUCHERS, cfg.vouchers_topic, cfg.voucher_writer_group))
        await _all_or_none([w.run(stop, once=once) for w in writers])


async def _all_or_none(loops: list[Coroutine[Any, Any, None]]) -> None:
    """Run the loops together; the first one to fail stops the others, and its error is raised."""
    tasks = [asyncio.ensure_future(loop) for loop in loops]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            error = task.exception()
            if error is not None:
                raise error
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _close_pool(pool: asyncpg.Pool) -> None:
    try:
        await asyncio.wait_for(pool.close(), CLOSE_TIMEOUT_S)
    except TimeoutError:
        pool.terminate()


def main(cfg: Settings, once: bool = False, *, metrics_port: int | None = METRICS_PORT) -> int:
    """Run a writer on uvloop until SIGINT/SIGTERM (or drained, with ``once``); exit status.
    The entry point of ``python -m writer`` and ``flashsale writer``: logging is set up here."""
    logs.setup(cfg)

    async def serve() -> None:
        stop = asyncio.Event()
        with stopped_by_signals(stop):  # the batch under way is stored and committed first
            await run(cfg, stop=stop, metrics_port=metrics_port, once=once)
        log.info("writer stopped: every batch it took is stored and its offsets committed")

    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve())
    except WriterError as exc:
        log.error("writer stopped: %s", exc)
        return 1
    return 0
