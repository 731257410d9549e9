"""Kafka topics of a benchmark's own, so its orders never reach the local writer's topic.

Without them every reserve run left its orders in ``flashsale.orders``: the next local writer
(a test, ``make demo``) first drained a benchmark's hundreds of thousands of orders.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from flashsale.stack.processes import settings_env
from kernel.settings import Settings


@contextmanager
def scratch_topics(cfg: Settings, wanted: dict[str, int]) -> Iterator[None]:
    """Topics ``{name: partitions}`` for the block, deleted afterwards."""
    admin = AdminClient({"bootstrap.servers": cfg.kafka_bootstrap})
    new = [NewTopic(name, partitions, 1) for name, partitions in wanted.items()]
    for future in admin.create_topics(new, operation_timeout=10).values():
        future.result(timeout=30)
    try:
        yield
    finally:
        for future in admin.delete_topics(list(wanted), operation_timeout=10).values():
            future.exception(timeout=30)  # cleanup only: a failed delete must not hide a result


@contextmanager
def own_topics(cfg: Settings, label: str) -> Iterator[dict[str, str]]:
    """Fresh orders and dead-letter topics for the block, deleted afterwards; yields the
    environment that points a gateway or a writer at them."""
    tag = uuid.uuid4().hex[:12]
    orders, deadletter = f"bench.{label}.orders.{tag}", f"bench.{label}.dl.{tag}"
    with scratch_topics(cfg, {orders: cfg.orders_partitions, deadletter: 1}):
        yield settings_env(
            orders_topic=orders,
            deadletter_topic=deadletter,
            writer_group=f"bench-{label}-writer-{tag}",
            writer_streams=("orders",),
        )
