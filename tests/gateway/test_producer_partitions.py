"""Sends stick to one writable partition per window (gateway/producer.py): a linger window's
orders make one batch. Unit tests on faked metadata and probe answers, and the real broker
acknowledging the sends of a producer that chose its partition from a health round."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from gateway.producer import OrderProducer, OutcomeUnknown
from kernel.request_context import kafka_headers
from kernel.settings import Settings


def _metadata(topics: tuple[str, ...], leaders: dict[int, int]) -> object:
    partitions = {
        n: SimpleNamespace(leader=leader, replicas=[1, 2, 3], isrs=[1, 2, 3])
        for n, leader in leaders.items()
    }
    return SimpleNamespace(
        topics={t: SimpleNamespace(partitions=partitions) for t in topics},
        brokers={b: SimpleNamespace(host="127.0.0.1", port=1) for b in (1, 2, 3)},
    )


def _judged(cfg: Settings, listed: object) -> OrderProducer:
    """A producer after a health round on ``listed`` in which every broker answered."""
    producer = OrderProducer(cfg)
    producer._last_listed = {cfg.orders_topic: listed, cfg.vouchers_topic: listed}
    producer._judge({1: True, 2: True, 3: True})
    return producer


def test_before_any_metadata_the_key_decides() -> None:
    producer = OrderProducer(Settings(env="local"))
    assert producer.partition("flashsale.orders", 0.0) == -1


def test_one_partition_per_window_then_the_next() -> None:
    cfg = Settings(env="local", kafka_linger_ms=5)
    topics = (cfg.orders_topic, cfg.vouchers_topic)
    producer = _judged(cfg, _metadata(topics, {n: 1 for n in range(4)}))
    first = producer.partition(cfg.orders_topic, 100.0)
    # The whole window (2 x linger = 10 ms) goes to the same partition ...
    assert {producer.partition(cfg.orders_topic, 100.0 + i / 1000) for i in range(10)} == {first}
    # ... and each new window to the next one, round the four.
    chosen = [producer.partition(cfg.orders_topic, 100.0 + 0.011 * w) for w in range(1, 9)]
    assert sorted(chosen[:4]) == [0, 1, 2, 3]
    assert chosen[4:] == chosen[:4]


def test_a_partition_without_a_leader_gets_nothing() -> None:
    cfg = Settings(env="local", kafka_linger_ms=5)
    topics = (cfg.orders_topic, cfg.vouchers_topic)
    producer = _judged(cfg, _metadata(topics, {0: 1, 1: -1, 2: 2}))
    chosen = {producer.partition(cfg.orders_topic, 0.011 * w) for w in range(20)}
    assert chosen == {0, 2}


async def test_the_broker_acknowledges_a_producer_with_a_chosen_partition(
    live_stack: Settings,
) -> None:
    topic = f"test.sticky.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": live_stack.kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(timeout=30)
    try:
        producer = OrderProducer(
            dataclasses.replace(live_stack, orders_topic=topic, vouchers_topic=topic)
        )
        producer.start()
        try:
            for _ in range(100):
                if producer.partition(topic, 0.0) >= 0:
                    break
                await asyncio.sleep(0.05)
            assert producer.partition(topic, 0.0) >= 0, "no health round listed the topic"
            sends = [producer.send(topic, b"k%d" % i, b"v") for i in range(50)]
            await asyncio.wait_for(asyncio.gather(*sends), 10)
        finally:
            await producer.close()
    finally:
        admin.delete_topics([topic])[topic].exception(timeout=30)


class _Recorder:
    """librdkafka's produce, recorded: (partition, on_delivery) of each copy, and its headers."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, Any]] = []
        self.headers: list[Any] = []

    def produce(
        self, *_args: object, partition: int, on_delivery: Any, headers: Any = None
    ) -> None:
        self.sent.append((partition, on_delivery))
        self.headers.append(headers)

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        return 0


async def test_a_send_to_a_partition_that_lost_its_leader_gets_a_copy_that_answers() -> None:
    """Sent before the round saw its leader hang: a copy goes to a writable partition, the
    first copy's timeout no longer answers, the copy's acknowledgement does."""
    cfg = Settings(env="local", kafka_linger_ms=5)
    topics = (cfg.orders_topic, cfg.vouchers_topic)
    producer = _judged(cfg, _metadata(topics, {0: 1, 1: 2}))
    recorder = _Recorder()
    producer._producer = recorder  # type: ignore[assignment]
    for outcome in (None, "timed out"):
        recorder.sent.clear()
        recorder.headers.clear()
        producer._sticky.clear()
        producer._judge({1: True, 2: True, 3: True})
        while producer.partition(cfg.orders_topic, asyncio.get_running_loop().time()) != 0:
            producer._sticky.clear()  # until the sticky partition is the one broker 1 leads
        carried = kafka_headers("edge-1", None)
        sending = asyncio.ensure_future(producer.send(cfg.orders_topic, b"k", b"v", carried))
        await asyncio.sleep(0)
        assert [p for p, _ in recorder.sent] == [0]
        producer._judge({1: False, 2: True, 3: True})  # broker 1 stopped answering
        assert [p for p, _ in recorder.sent] == [0, 1]
        assert recorder.headers == [carried, carried]  # the copy names the same request
        recorder.sent[0][1]("message timed out", None)  # the first copy's report
        await asyncio.sleep(0)
        assert not sending.done()
        recorder.sent[1][1](outcome, None)
        if outcome is None:
            await asyncio.wait_for(sending, 1)
        else:
            with pytest.raises(OutcomeUnknown):
                await asyncio.wait_for(sending, 1)
    await producer.close(0.1)
