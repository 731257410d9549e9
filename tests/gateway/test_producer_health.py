"""The producer knows when Kafka cannot acknowledge, so a purchase can answer 503 before it
takes a unit: against the real broker, and against an address where no broker listens."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time
from types import SimpleNamespace

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


def _metadata(topics: tuple[str, ...], brokers: dict[int, int], leader: int = 1) -> object:
    """What librdkafka lists while brokers are dead but not yet fenced: all three in sync."""
    partition = SimpleNamespace(leader=leader, replicas=[1, 2, 3], isrs=[1, 2, 3])
    return SimpleNamespace(
        topics={t: SimpleNamespace(partitions={0: partition}) for t in topics},
        brokers={b: SimpleNamespace(host="127.0.0.1", port=p) for b, p in brokers.items()},
    )


def test_replicas_listed_in_sync_that_refuse_connections_close_the_gate(
    live_stack: Settings,
) -> None:
    """Metadata lags a SIGKILL by the fencing timeout; the probe does not (a unit test: the
    metadata is faked, the connections are real; tests/system/test_broker_faults.py has the
    whole-system rows). One dead follower of three: a send waits for the fencing, the gate
    stays open. Two dead, or a dead leader: nothing can be acknowledged there now."""
    producer = OrderProducer(live_stack)
    topics = (live_stack.orders_topic, live_stack.vouchers_topic)
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        up, down = int(listening.getsockname()[1]), _free_port()
        listed = _metadata(topics, {1: up, 2: up, 3: up})
        producer._producer = SimpleNamespace(list_topics=lambda *_a, **_k: listed)  # type: ignore[assignment]
        assert producer._in_sync()
        listed = _metadata(topics, {1: up, 2: down, 3: up})
        assert producer._in_sync()
        listed = _metadata(topics, {1: up, 2: down, 3: down})
        assert not producer._in_sync()
        listed = _metadata(topics, {1: down, 2: up, 3: up}, leader=1)
        assert not producer._in_sync()
