"""The hand-off of an event just put in an outbox to Kafka, under the rules every outbox shares
(the outcomes are gateway/producer.py's):

- delivered: the outbox entry is dropped (batched);
- ``NeverSent``: the event never left this process, so the unit can safely go back, and the
  caller's retry may take it again: 503. If Redis cannot take it back now, the entry stays in
  the outbox and the relay sends it later;
- ``OutcomeUnknown``: it may be in the log, so the hold stays (the relay re-sends, the writer
  stores it once): 503 naming the orderId.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from gateway.errors import Unavailable
from gateway.outbox import Outbox
from gateway.producer import NeverSent, OrderProducer, OutcomeUnknown
from kernel.request_context import Headers
from shard_router import ShardUnavailable

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
C = TypeVar("C")


class HandOff(Generic[K, C]):
    """``give_back(place, order_id, context)`` returns a unit that was never sent; ``context``
    is what it needs beyond the place and the orderId, one value the caller has at hand (no
    closure or ``*args`` per request: this is on the purchase path)."""

    def __init__(
        self,
        what: str,
        outbox: Outbox[K, Any],
        producer: OrderProducer,
        give_back: Callable[[K, str, C], Awaitable[object]],
    ) -> None:
        self._what = what
        self._topic = outbox.topic
        self._acks = outbox.acks
        self._producer = producer
        self._give_back = give_back

    async def send(
        self, place: K, order_id: str, payload: bytes, context: C, headers: Headers | None = None
    ) -> None:
        """``headers``: the Kafka message's (the request id and trace context)."""
        try:
            await self._producer.send(self._topic, order_id.encode(), payload, headers)
        except NeverSent as exc:
            log.warning("%s %s never sent: %s", self._what, order_id, exc)
            try:
                await self._give_back(place, order_id, context)
            except ShardUnavailable:
                # The hold stays, and the relay sends its outbox entry later: the buyer's order.
                raise Unavailable(orderId=order_id) from None
            raise Unavailable() from None
        except OutcomeUnknown as exc:
            log.warning("%s %s outcome unknown: %s", self._what, order_id, exc)
            raise Unavailable(orderId=order_id) from None
        self._acks.ack(place, order_id)
