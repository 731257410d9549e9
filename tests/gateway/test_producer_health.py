"""The producer knows when Kafka cannot acknowledge, so a purchase can answer 503 before it
takes a unit: against the real broker, an address where no broker listens, and one that takes
connections but never answers (a hung broker; tests/system/test_broker_faults.py hangs real
ones under load)."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from flashsale.stack.kafka import KafkaCluster
from gateway.broker_probe import BrokerProbes
from gateway.producer import OrderProducer
from kernel.settings import Settings
from rig.ports import free_port


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
    cfg = dataclasses.replace(live_stack, kafka_bootstrap=f"127.0.0.1:{free_port()}")
    producer = OrderProducer(cfg)
    producer.start()
    try:
        took = await _settle(producer, False, 2)
        assert took < 1.5
    finally:
        await producer.close(timeout_s=0.1)


def _metadata(topics: tuple[str, ...], leader: int = 1) -> object:
    """What librdkafka lists while brokers are hung or dead but not yet fenced: all in sync."""
    partition = SimpleNamespace(leader=leader, replicas=[1, 2, 3], isrs=[1, 2, 3])
    return SimpleNamespace(
        topics={t: SimpleNamespace(partitions={0: partition}) for t in topics},
        brokers={b: SimpleNamespace(host="127.0.0.1", port=1) for b in (1, 2, 3)},
    )


def test_replicas_listed_in_sync_that_do_not_answer_close_the_gate(live_stack: Settings) -> None:
    """Metadata lags a hang or a SIGKILL by the fencing timeout; the probe does not. One silent
    follower of three: a send waits for the fencing, the gate stays open. Two silent, or a
    silent leader: nothing can be acknowledged there now."""
    producer = OrderProducer(live_stack)
    topics = (live_stack.orders_topic, live_stack.vouchers_topic)
    producer._last_listed = {t: _metadata(topics) for t in topics}
    assert producer._judge({1: True, 2: True, 3: True})
    assert producer._judge({1: True, 2: False, 3: True})
    assert not producer._judge({1: True, 2: False, 3: False})
    assert not producer._judge({1: False, 2: True, 3: True})
    assert not producer._judge({2: True, 3: True})  # the leader is no broker the cluster lists


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


@pytest.fixture
def silent() -> Iterator[int]:
    """A port whose kernel completes every handshake and nobody ever reads: a hung broker."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


async def test_the_probe_needs_the_broker_s_answer(live_stack: Settings, silent: int) -> None:
    probes = BrokerProbes(0.25)
    live = _address(live_stack.kafka_bootstrap.split(",")[0])
    brokers = {1: live, 2: ("127.0.0.1", silent), 3: ("127.0.0.1", free_port())}
    try:
        started = time.monotonic()
        assert await probes.ask(brokers) == {1: True, 2: False, 3: False}
        took = time.monotonic() - started
        # The brokers are asked at once: one deadline for the round, not one per broker.
        assert 0.25 <= took < 0.45, took
        assert await probes.ask({1: brokers[1]}) == {1: True}  # the kept connection answers
    finally:
        probes.close()


def test_a_probe_round_costs_little_cpu(live_stack: Settings) -> None:
    """It runs every health interval in every gateway, for ever: what one round of the three
    brokers costs the event loop's process (printed; ``pytest -s``)."""
    brokers = {n.node_id: _address(n.address) for n in KafkaCluster(live_stack).nodes}

    async def rounds(n: int) -> float:
        probes = BrokerProbes(1.0)
        try:
            assert all((await probes.ask(brokers)).values())  # connected before the clock
            started = time.process_time()
            for _ in range(n):
                await probes.ask(brokers)
            return (time.process_time() - started) / n
        finally:
            probes.close()

    per_round = asyncio.run(rounds(400))
    print(f"\nprobe round of {len(brokers)} brokers: {per_round * 1e6:.0f} us CPU")
    assert per_round < 0.002  # 4 rounds a second: under 1% of a core
