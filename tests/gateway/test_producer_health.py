"""The producer knows when Kafka cannot acknowledge, so a purchase can answer 503 before it
takes a unit: against the real broker, and against an address where no broker listens."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time

from gateway.producer import OrderProducer
from kernel.settings import Settings


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _settle(producer: OrderProducer, want: bool, within_s: float) -> float:
    """Seconds until ``available`` equals ``want``."""
    started = time.monotonic()
    while producer.available != want:
        assert time.monotonic() - started < within_s, f"available stayed {producer.available}"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def test_a_reachable_broker_is_available(live_stack: Settings) -> None:
    producer = OrderProducer(live_stack)
    producer.start()
    try:
        await asyncio.sleep(live_stack.kafka_health_interval_ms / 1000 * 3)  # a few rounds
        assert producer.available
    finally:
        await producer.close()


async def test_no_broker_is_unavailable_within_a_second(live_stack: Settings) -> None:
    cfg = dataclasses.replace(live_stack, kafka_bootstrap=f"127.0.0.1:{_free_port()}")
    producer = OrderProducer(cfg)
    producer.start()
    try:
        took = await _settle(producer, False, 2)
        assert took < 1.5
    finally:
        await producer.close(timeout_s=0.1)
