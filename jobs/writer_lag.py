"""How far the writer is behind Kafka: what reconciliation counts as still in flight."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from kernel.settings import Settings


def writer_lag(cfg: Settings, topic_name: str | None = None, group: str | None = None) -> int:
    """Messages on the orders topic (or this one) that the writer group (or this one) has not
    committed yet."""
    topic_name = topic_name or cfg.orders_topic
    consumer = Consumer(
        {
            "bootstrap.servers": cfg.kafka_bootstrap,
            "group.id": group or cfg.writer_group,
            "enable.auto.commit": False,
        }
    )
    try:
        topic = consumer.list_topics(topic_name, timeout=5).topics[topic_name]
        partitions = [TopicPartition(topic_name, p) for p in topic.partitions]
        committed = consumer.committed(partitions, timeout=5)
        lag = 0
        for tp in committed:
            low, high = consumer.get_watermark_offsets(tp, timeout=5)
            lag += high - (tp.offset if tp.offset >= 0 else low)
        return lag
    finally:
        consumer.close()
