"""The outbox relay, one for every kind of outbox: it re-sends entries that stayed too long (a
gateway died between the Lua call and the ack, or the ack's outcome was unknown). The writer
stores an event once per orderId, so a re-send of one that did reach Kafka is harmless.

An ``Outbox`` says what differs between the kinds (see gateway/outboxes.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Generic, Protocol, TypeVar

import msgspec

from gateway.acks import BatchedAcks
from gateway.metrics import OUTBOX_ENTRIES, RELAYED
from gateway.producer import OrderProducer
from kernel.events import Event, decode
from kernel.periodic import run_every
from kernel.round_robin import RoundRobin
from kernel.settings import Settings

K = TypeVar("K", bound=Hashable)
E = TypeVar("E", bound=Event)


class OutboxStore(Protocol[K]):
    """Where one kind of outbox lives: a Redis hash of encoded events by orderId per place."""

    async def outboxes_in_use(self, places: list[K], /) -> list[K]: ...

    async def outbox(self, place: K, /) -> Mapping[str, bytes]: ...

    def ack_outbox(self, place: K, order_ids: list[str], /) -> asyncio.Future[Any]: ...


class Outbox(Generic[K, E]):
    """One kind of outbox: events Kafka must get, of type ``E``, kept at places ``K``."""

    def __init__(
        self,
        name: str,
        topic: str,
        store: OutboxStore[K],
        places: Callable[[], list[K]],
        event: type[E],
        written_ms: Callable[[E], int],
    ) -> None:
        self.name = name  # in logs
        self.topic = topic
        self.store = store
        self.places = places  # the places whose outbox may hold entries now
        self.event = event
        self.written_ms = written_ms  # when the event was put in the outbox
        self.acks = BatchedAcks(f"{name} ack", store.ack_outbox)


async def relay_once(
    outbox: Outbox[K, E], producer: OrderProducer, scan: RoundRobin[K], min_age_ms: int
) -> int:
    """Re-send every entry older than ``min_age_ms`` in this round's share of the outboxes;
    returns how many were sent."""
    cutoff_ms = time.time() * 1000 - min_age_ms
    sent = entries = 0
    for place in await outbox.store.outboxes_in_use(scan.take(outbox.places())):
        found = await outbox.store.outbox(place)
        entries += len(found)
        for order_id, payload in found.items():
            try:
                event = decode(payload)
            except msgspec.MsgspecError:
                continue  # not ours to judge: reconciliation reports it
            if not isinstance(event, outbox.event) or outbox.written_ms(event) > cutoff_ms:
                continue
            await producer.send(outbox.topic, order_id.encode(), payload)
            outbox.acks.ack(place, order_id)
            sent += 1
    RELAYED.inc(sent)
    OUTBOX_ENTRIES.labels(outbox.topic).set(entries)  # the relay backlog, for the alerts
    return sent


async def run_relay(
    cfg: Settings, outbox: Outbox[K, E], producer: OrderProducer, stop: asyncio.Event
) -> None:
    scan: RoundRobin[K] = RoundRobin(cfg.outbox_relay_scan_budget)
    await run_every(
        cfg.outbox_relay_interval_ms / 1000,
        lambda: relay_once(outbox, producer, scan, cfg.outbox_relay_min_age_ms),
        stop,
        f"{outbox.name} relay round",
    )
