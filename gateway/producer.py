"""The Kafka hand-off: an idempotent producer (acks=all) whose delivery reports resolve asyncio
futures, so a request awaits its own acknowledgement while librdkafka batches by linger.

Outcomes a caller must tell apart:
- ``NeverSent``: produce() refused the message (queue full, bad config): it never left the
  process, so the caller may release the unit.
- ``OutcomeUnknown``: a delivery error or the deadline passed: the message may be in the log.
  Never release on it; the outbox relay re-sends and the writer deduplicates.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from typing import Any

from confluent_kafka import KafkaException, Producer

from flashsale.config import Settings


class NeverSent(Exception):
    pass


class OutcomeUnknown(Exception):
    pass


class OrderProducer:
    def __init__(self, cfg: Settings) -> None:
        self.timeout_s = cfg.kafka_timeout_ms / 1000
        self._producer = Producer(
            {
                "bootstrap.servers": cfg.kafka_bootstrap,
                "acks": "all",
                # librdkafka does not default to idempotence: set it, so a retried batch is not
                # written twice by the broker.
                "enable.idempotence": True,
                "linger.ms": 2,
                "batch.num.messages": 10000,
                "queue.buffering.max.messages": 100_000,  # bounded memory: beyond it, NeverSent
                "message.timeout.ms": cfg.kafka_timeout_ms,
                "compression.type": "lz4",
            }
        )
        # Delivery reports reach the event loop in batches: one thread-safe wake-up (a write to
        # the loop's self-pipe) per batch of reports, not one per message.
        self._reports: collections.deque[tuple[asyncio.Future[None], Any]] = collections.deque()
        self._wakeup_pending = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running = True
        self._poller = threading.Thread(target=self._poll, name="kafka-delivery", daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while self._running:
            self._producer.poll(0.05)

    def _report(self, future: asyncio.Future[None], err: Any) -> None:
        """Called on the poller thread for each delivery report."""
        self._reports.append((future, err))
        if not self._wakeup_pending and self._loop is not None:
            self._wakeup_pending = True  # at worst a race costs one extra wake-up
            self._loop.call_soon_threadsafe(self._settle_reports)

    def _settle_reports(self) -> None:
        self._wakeup_pending = False  # first, so a report appended meanwhile wakes us again
        while self._reports:
            _settle(*self._reports.popleft())

    async def send(self, topic: str, key: bytes, value: bytes) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        future: asyncio.Future[None] = loop.create_future()

        def delivered(err: Any, _msg: Any) -> None:
            self._report(future, err)

        try:
            self._producer.produce(topic, value, key, on_delivery=delivered)
        except (BufferError, KafkaException) as exc:
            raise NeverSent(str(exc)) from exc
        # One timer handle, not wait_for (which wraps the future in another task each call).
        deadline = loop.call_later(
            self.timeout_s + 0.5, _settle, future, "no delivery report before the deadline"
        )
        try:
            await future
        finally:
            deadline.cancel()

    def reachable(self, timeout_s: float = 1.0) -> bool:
        try:
            self._producer.list_topics(timeout=timeout_s)
        except KafkaException:
            return False
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        self._producer.flush(timeout_s)
        self._running = False
        self._poller.join(timeout=1)


def _settle(future: asyncio.Future[None], err: Any) -> None:
    if future.done():
        return
    if err is None:
        future.set_result(None)
    else:
        future.set_exception(OutcomeUnknown(str(err)))
