"""The session's Kafka is what the settings claim: ``kafka_brokers`` brokers running and
registered, every project topic with the replication factor and ``min.insync.replicas`` of that
size (3 and 2 for the replicated stack), and nothing under-replicated at rest."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from flashsale.stack.kafka import KafkaCluster, replication
from flashsale.stack.kafka_topics import HEALTH_TOPIC
from flashsale.stack.processes import wait_until
from kernel.settings import Settings

pytestmark = pytest.mark.integration

IN_SYNC_TIMEOUT_S = 60.0  # a broker restarted by an earlier fault test may still be catching up


def test_every_broker_the_settings_ask_for_runs_and_is_registered(live_stack: Settings) -> None:
    kafka = KafkaCluster(live_stack)
    assert kafka.mismatch == "", kafka.mismatch
    assert len(kafka.nodes) == live_stack.kafka_brokers
    assert all(proc.pid() is not None for proc in kafka.processes())
    ids = {node.node_id for node in kafka.nodes}
    assert wait_until(lambda: kafka.topics.brokers() == ids, IN_SYNC_TIMEOUT_S)


def test_every_project_topic_is_replicated_and_in_sync_at_rest(live_stack: Settings) -> None:
    kafka = KafkaCluster(live_stack)
    rf, min_isr = replication(live_stack.kafka_brokers)
    if live_stack.kafka_brokers == 3:
        assert (rf, min_isr) == (3, 2)  # one broker may go, an acknowledged order keeps a copy
    deadline = time.monotonic() + IN_SYNC_TIMEOUT_S
    while not kafka.topics.in_sync() and time.monotonic() < deadline:
        time.sleep(0.5)
    states = kafka.topics.describe()
    assert set(states) == set(kafka.topics.wanted)
    for name, state in states.items():
        assert state.replication_factor == rf, name
        assert state.min_insync_replicas == min_isr, name
        assert (state.under_replicated, state.offline) == (0, 0), state
    assert states[live_stack.orders_topic].partitions == live_stack.orders_partitions
    # The status lines agree: every partition is led by some broker, none under-replicated.
    led = kafka.topics.leadership()
    assert sum(under for _, under in led.values()) == 0
    assert set(led) <= {node.node_id for node in kafka.nodes}


def test_the_consumer_offsets_are_replicated_too(live_stack: Settings) -> None:
    """Where the writer's committed offsets live: with RF 1 a broker loss would lose them."""
    kafka = KafkaCluster(live_stack)
    rf, _ = replication(live_stack.kafka_brokers)
    # A commit creates the offsets topic if no consumer group has committed on this stack yet.
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"rf-{uuid.uuid4()}"})
    try:
        consumer.commit(offsets=[TopicPartition(HEALTH_TOPIC, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    offsets = kafka.topics.describe(["__consumer_offsets"])
    assert offsets["__consumer_offsets"].replication_factor == rf
