"""Kafka topics of a benchmark's own, so its orders never reach the local writer's topic.

Without them every reserve run left its orders in ``flashsale.orders``: the next local writer
(a test, ``make demo``) first drained a benchmark's hundreds of thousands of orders.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from kernel.settings import Settings


@contextmanager
def own_topics(cfg: Settings, label: str) -> Iterator[dict[str, str]]:
    """Fresh orders and dead-letter topics for the block, deleted afterwards; yields the
    environment that points a gateway or a writer at them."""
    tag = uuid.uuid4().hex[:12]
    names = {"orders": f"bench.{label}.orders.{tag}", "deadletter": f"bench.{label}.dl.{tag}"}
    admin = AdminClient({"bootstrap.servers": cfg.kafka_bootstrap})
    wanted = [
        NewTopic(names["orders"], cfg.orders_partitions, 1),
        NewTopic(names["deadletter"], 1, 1),
    ]
    for future in admin.create_topics(wanted, operation_timeout=10).values():
        future.result(timeout=30)
    try:
        yield {
            "FLASHSALE_ORDERS_TOPIC": names["orders"],
            "FLASHSALE_DEADLETTER_TOPIC": names["deadletter"],
            "FLASHSALE_WRITER_GROUP": f"bench-{label}-writer-{tag}",
            "FLASHSALE_WRITER_STREAMS": "orders",
        }
    finally:
        for future in admin.delete_topics(list(names.values()), operation_timeout=10).values():
            future.exception(timeout=30)
