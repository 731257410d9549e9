"""Kafka topics of a test's own: created with their partitions listed before a test uses them,
deleted afterwards, so no test reads another's messages."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from kernel.settings import Settings

LISTED_TIMEOUT_S = 30.0


def admin_client(cfg: Settings) -> AdminClient:
    return AdminClient({"bootstrap.servers": cfg.kafka_bootstrap})


def create_topics(admin: AdminClient, wanted: dict[str, int]) -> None:
    """Create ``{name: partitions}`` and wait until the broker's metadata lists every partition
    (creation is asynchronous: a producer could otherwise meet a topic without them)."""
    futures = admin.create_topics(
        [NewTopic(name, parts, 1) for name, parts in wanted.items()], operation_timeout=10
    )
    for future in futures.values():
        future.result(timeout=30)
    deadline = time.monotonic() + LISTED_TIMEOUT_S
    while time.monotonic() < deadline:
        listed = admin.list_topics(timeout=5).topics
        if all(name in listed and len(listed[name].partitions) == n for name, n in wanted.items()):
            return
        time.sleep(0.05)
    raise TimeoutError(f"topics {sorted(wanted)} not listed")


def delete_topics(admin: AdminClient, names: Sequence[str]) -> None:
    for future in admin.delete_topics(list(names), operation_timeout=10).values():
        with contextlib.suppress(Exception):  # cleanup only
            future.result(timeout=30)


@contextlib.contextmanager
def scratch_topics(cfg: Settings, wanted: dict[str, int]) -> Iterator[None]:
    """``create_topics`` for the block, ``delete_topics`` after it."""
    admin = admin_client(cfg)
    create_topics(admin, wanted)
    try:
        yield
    finally:
        delete_topics(admin, list(wanted))
