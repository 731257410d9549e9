"""Delivering stuck outbox entries (jobs/audit.py): what the gateways' relay does for a live
sale, for entries no relay visits any more. Sent as the relay sends them, keyed by orderId, and
dropped from the outbox only once Kafka acknowledged them; the writer stores an orderId once, so
a copy that did reach Kafka before is harmless."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import msgspec
from confluent_kafka import Producer

from jobs.audit import Stuck
from kernel.events import OrderPlaced, VoucherReserved, decode
from kernel.settings import Settings

P = TypeVar("P")

FLUSH_TIMEOUT_S = 10.0


def _send(cfg: Settings, topic: str, entries: Sequence[Stuck[Any]]) -> set[str]:
    """The orderIds Kafka acknowledged (acks=all, idempotent, as the gateways' producer)."""
    producer = Producer(
        {
            "bootstrap.servers": cfg.kafka_bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": int(FLUSH_TIMEOUT_S * 1000),
        }
    )
    acked: set[str] = set()

    def report(err: Any, msg: Any) -> None:
        if err is None:
            acked.add(msg.key().decode())

    for entry in entries:
        producer.produce(topic, entry.payload, entry.order_id.encode(), on_delivery=report)
    producer.flush(FLUSH_TIMEOUT_S)
    return acked


def _is(payload: bytes, kind: type[OrderPlaced] | type[VoucherReserved]) -> bool:
    try:
        return isinstance(decode(payload), kind)
    except msgspec.MsgspecError:
        return False  # not ours to send: it stays stuck, and reported


async def deliver(
    cfg: Settings,
    topic: str,
    kind: type[OrderPlaced] | type[VoucherReserved],
    stuck: Sequence[Stuck[P]],
    ack: Callable[[P, list[str]], Awaitable[object]],
) -> int:
    """Send the ``stuck`` entries that are events of ``kind`` to ``topic``, then ``ack`` (drop
    from their outbox) those Kafka acknowledged; returns how many."""
    sendable = [entry for entry in stuck if _is(entry.payload, kind)]
    if not sendable:
        return 0
    acked = await asyncio.to_thread(_send, cfg, topic, sendable)
    by_place: defaultdict[P, list[str]] = defaultdict(list)
    for entry in sendable:
        if entry.order_id in acked:
            by_place[entry.place].append(entry.order_id)
    for place, order_ids in by_place.items():
        await ack(place, order_ids)
    return len(acked)
