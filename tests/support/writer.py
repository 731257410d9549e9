"""Helpers for the writer tests: a dedicated topic pair per test, items stored unarmed, orders
produced by hand, the dead-letter topic read back, database snapshots. (A writer process beside a
gateway is ``rig.sale.running_writer``; waiting, ``rig.waiting.until``.) No tests here."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from kernel.events import OrderPlaced, encode
from kernel.ids import new_order_id
from kernel.settings import Settings
from rig.sale import stored_item
from tests.support.kafka import admin_client, create_topics, delete_topics
from writer import run

PARTITIONS = 4
DRAIN_TIMEOUT_S = 45.0
HOUR_MS = 3_600_000
# Orders are created "now" and expire in an hour: an expiry job running beside the tests must not
# touch them. One base for the whole session, so twin sales get identical timestamps.
BASE_MS = int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Topics:
    orders: str
    deadletter: str
    cfg: Settings  # settings pointed at these topics and a fresh writer group

    def writer(self, **changes: Any) -> Settings:
        """A copy for another writer group (or other settings) on the same topics."""
        group = changes.pop("writer_group", f"test-writer-{uuid.uuid4().hex[:12]}")
        return dataclasses.replace(self.cfg, writer_group=group, **changes)


@asynccontextmanager
async def topics(cfg: Settings, partitions: int = PARTITIONS) -> AsyncIterator[Topics]:
    tag = uuid.uuid4().hex[:12]
    orders, deadletter = f"test.orders.{tag}", f"test.deadletter.{tag}"
    admin = admin_client(cfg)
    await asyncio.to_thread(create_topics, admin, {orders: partitions, deadletter: 1})
    settings = dataclasses.replace(
        cfg,
        orders_topic=orders,
        deadletter_topic=deadletter,
        writer_group=f"test-writer-{tag}",
        writer_batch_size=50,
    )
    try:
        yield Topics(orders, deadletter, settings)
    finally:
        await asyncio.to_thread(delete_topics, admin, [orders, deadletter])


async def make_item(db: asyncpg.Pool, quantity: int, shards: int = PARTITIONS) -> int:
    return await stored_item(db, quantity, shards, name="writer test")


def order(
    item: int,
    user: int,
    *,
    shards: int = PARTITIONS,
    shard: int | None = None,
    order_id: str | None = None,
    created_at_ms: int = BASE_MS,
) -> OrderPlaced:
    home = user % shards
    return OrderPlaced(
        order_id=order_id or new_order_id(item),
        item_id=item,
        user_id=user,
        shard=home if shard is None else shard,
        home_shard=home,
        created_at_ms=created_at_ms + user,
        expires_at_ms=created_at_ms + user + HOUR_MS,
    )


Message = tuple[bytes, bytes, int]  # key, value, partition


def messages(
    events: Sequence[OrderPlaced], partition: Callable[[int], int] | None = None
) -> list[Message]:
    """Each event keyed by its orderId, on partition ``partition(i)`` (default i % PARTITIONS)."""
    pick = partition or (lambda i: i % PARTITIONS)
    return [(e.order_id.encode(), encode(e), pick(i)) for i, e in enumerate(events)]


async def produce(cfg: Settings, topic: str, batch: Sequence[Message]) -> None:
    def send() -> None:
        producer = Producer(
            {"bootstrap.servers": cfg.kafka_bootstrap, "acks": "all", "enable.idempotence": True}
        )
        errors: list[object] = []
        for key, value, partition in batch:
            producer.produce(
                topic, value, key, partition=partition, on_delivery=lambda e, _m: errors.append(e)
            )
        assert producer.flush(30) == 0
        assert [e for e in errors if e is not None] == []

    await asyncio.to_thread(send)


async def read_all(cfg: Settings, topic: str, expect: int, timeout_s: float = 20) -> list[Any]:
    """The dead letters of a (one-partition) topic, decoded: wait for ``expect`` of them, then
    half a second more so that an unexpected extra one would show."""

    def read() -> list[Any]:
        consumer = Consumer(
            {
                "bootstrap.servers": cfg.kafka_bootstrap,
                "group.id": f"test-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        found: list[Any] = []
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                msg = consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    found.append(msgspec.json.decode(msg.value() or b""))
                if len(found) >= expect:
                    deadline = min(deadline, time.monotonic() + 0.5)
        finally:
            consumer.close()
        return found

    return await asyncio.to_thread(read)


async def drain(cfg: Settings, **kwargs: Any) -> None:
    """Run an in-process writer until its group has drained the topic."""
    await asyncio.wait_for(run(cfg, metrics_port=None, once=True, **kwargs), DRAIN_TIMEOUT_S)


async def rows(db: asyncpg.Pool, item: int) -> dict[str, asyncpg.Record]:
    found = await db.fetch(
        "SELECT id, item_id, user_id, shard, status, failure_reason, created_at, expires_at"
        " FROM flash_sale_order WHERE item_id = $1",
        item,
    )
    return {str(r["id"]): r for r in found}


async def sold(db: asyncpg.Pool, item: int) -> int:
    value: int = await db.fetchval("SELECT sold FROM flash_sale_item WHERE id = $1", item)
    return value


async def snapshot(db: asyncpg.Pool, item: int) -> tuple[int, list[tuple[Any, ...]]]:
    """The item's sold and its orders, without ids (comparable across twin items): a failure
    reason is reduced to its kind, the text before the colon."""
    found = await rows(db, item)
    return await sold(db, item), sorted(
        (
            r["user_id"],
            r["shard"],
            r["status"],
            (r["failure_reason"] or "").split(":")[0],
            r["created_at"],
            r["expires_at"],
        )
        for r in found.values()
    )
