"""The outbox relay, one for every kind of outbox: it re-sends entries that stayed too long (a
gateway died between the Lua call and the ack, or the ack's outcome was unknown). The writer
stores an event once per orderId, so a re-send of one that did reach Kafka is harmless.

An entry's age is measured by the relay itself, from the round that first saw it, on its own
monotonic clock: never its wall clock against the timestamp another gateway wrote, so a skewed
clock cannot make a fresh entry look old (re-sent while its own hand-off still runs, whose
give-back would then put the unit of an order in Kafka back on sale). A relay that just started
waits ``min_age`` before its first re-send.

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
from kernel.request_context import kafka_headers
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
    ) -> None:
        self.name = name  # in logs
        self.topic = topic
        self.store = store
        self.places = places  # the places whose outbox may hold entries now
        self.event = event
        self.acks = BatchedAcks(f"{name} ack", store.ack_outbox)
        # place -> orderId -> this relay's monotonic time at the round that first saw it
        self.first_seen: dict[K, dict[str, float]] = {}


async def relay_once(
    outbox: Outbox[K, E], producer: OrderProducer, scan: RoundRobin[K], min_age_ms: int
) -> int:
    """Re-send every entry this relay has seen for ``min_age_ms`` or more in this round's share
    of the outboxes; returns how many were sent."""
    now = time.monotonic()
    cutoff = now - min_age_ms / 1000
    live = outbox.places()
    for gone in outbox.first_seen.keys() - set(live):
        del outbox.first_seen[gone]
    share = scan.take(live)
    in_use = await outbox.store.outboxes_in_use(share)
    for empty in set(share) - set(in_use):
        outbox.first_seen.pop(empty, None)
    sent = entries = 0
    for place in in_use:
        found = await outbox.store.outbox(place)
        entries += len(found)
        before = outbox.first_seen.get(place, {})
        seen = outbox.first_seen[place] = {o: before.get(o, now) for o in found}
        for order_id, payload in found.items():
            if seen[order_id] > cutoff:
                continue
            try:
                event = decode(payload)
            except msgspec.MsgspecError:
                continue  # not ours to judge: reconciliation reports it
            if not isinstance(event, outbox.event):
                continue
            # The entry holds the event only: the request id is the orderId's (a trusted
            # proxy's id and the trace context went with the first send, if it got out).
            headers = kafka_headers(order_id, None)
            await producer.send(outbox.topic, order_id.encode(), payload, headers)
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
