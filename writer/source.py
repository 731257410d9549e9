"""One topic (the orders topic, or the vouchers topic) as a source of batches: a confluent-kafka
consumer in a consumer group.

librdkafka calls block, so each runs in this source's own single worker thread (asyncio's
``to_thread`` pattern with a private executor): they never overlap, and ``close`` waits for a
``consume`` still in flight instead of racing it. Rebalance callbacks run in that thread too.
Offsets are committed by hand, synchronously, only once a batch is stored. A commit that fails
is kept and tried again with the next one (offsets are cumulative), and before its partition is
revoked, so a rebalance costs at most a redelivery, which the sink absorbs.

Idle, a poll waits for one message up to ``IDLE_WAIT_S`` instead of a batch's
``writer_batch_ms``: an empty topic polled every 50 ms woke the loop, the worker thread and the
lag gauges 20 times a second for each topic. The first message still returns at once, and the
rest of its batch is gathered as before.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

from kernel.settings import Settings
from writer import metrics
from writer.batch import Record

log = logging.getLogger(__name__)

# The broker's minimum: a writer killed without leaving the group holds its partitions this long.
SESSION_TIMEOUT_MS = 6000
IDLE_WAIT_S = 0.5  # also the longest a stop waits for an idle poll to return
KAFKA_TIMEOUT_S = 10.0

_NO_TOPIC = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)

Place = tuple[str, int]
T = TypeVar("T")


class EventSource:
    def __init__(self, cfg: Settings, topic: str, group: str) -> None:
        """``topic`` (the orders or the vouchers topic) as a member of consumer group ``group``."""
        self.topic = topic
        self.batch_size = max(1, cfg.writer_batch_size)
        self.batch_s = max(cfg.writer_batch_ms, 1) / 1000
        self.idle = False  # the last poll found nothing: wait for one message, not a batch
        self._pending: dict[Place, int] = {}
        self._start: dict[Place, int] = {}  # committed offset at assignment, for the lag
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="writer-kafka")
        self._consumer = Consumer(
            {
                "bootstrap.servers": cfg.kafka_bootstrap,
                "group.id": group,
                "client.id": "flashsale-writer",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": SESSION_TIMEOUT_MS // 3,
                "enable.partition.eof": False,
            }
        )
        self._consumer.subscribe(
            [self.topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        # Offset queries go through a second client that never joins the group: on the group
        # member's own connection they would queue behind its long-polling fetches.
        self._probe = Consumer(
            {
                "bootstrap.servers": cfg.kafka_bootstrap,
                "group.id": group,
                "client.id": "flashsale-writer-probe",
                "enable.auto.commit": False,
            }
        )

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, functools.partial(fn, *args))

    async def poll_batch(self) -> list[Record]:
        """Up to ``writer_batch_size`` messages, waiting at most ``writer_batch_ms``."""
        return await self._call(self._poll_batch)

    async def commit(self, offsets: dict[Place, int]) -> bool:
        """Commit these offsets (and any left from a failed commit) synchronously."""
        return await self._call(self._commit, offsets)

    async def lags(self) -> dict[Place, int]:
        """Per assigned partition: high watermark (as last fetched) minus position."""
        return await self._call(self._lags)

    async def drained(self) -> bool:
        """Has the group committed every partition of the topic up to its high watermark?"""
        return await self._call(self._drained)

    async def close(self) -> None:
        """Commit what is pending and leave the group, after any call still in flight."""
        try:
            await self._call(self._close)
        finally:
            self._thread.shutdown(wait=False)

    # The blocking halves, run in the worker thread only.

    def _poll_batch(self) -> list[Record]:
        if self.idle:
            messages = self._consumer.consume(1, IDLE_WAIT_S)
            if messages and self.batch_size > 1:  # the batch it opens, as a busy poll's
                messages += self._consumer.consume(self.batch_size - 1, self.batch_s)
        else:
            messages = self._consumer.consume(self.batch_size, self.batch_s)
        self.idle = not messages
        records: list[Record] = []
        for msg in messages:
            error = msg.error()
            if error is not None:
                if error.fatal():
                    raise KafkaException(error)
                log.warning("consumer: %s", error)
                continue
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            if topic is None or partition is None or offset is None:
                continue
            headers = msg.headers()  # a list of (name, value), as the producer gave them
            listed = headers if isinstance(headers, list) else None
            records.append(Record(topic, partition, offset, msg.key(), msg.value(), listed))
        return records

    def _commit(self, offsets: dict[Place, int]) -> bool:
        for place, offset in offsets.items():
            self._pending[place] = max(self._pending.get(place, 0), offset)
        return self._commit_pending()

    def _commit_pending(self) -> bool:
        if not self._pending:
            return True
        pending = [TopicPartition(t, p, o) for (t, p), o in self._pending.items()]
        try:
            results = self._consumer.commit(offsets=pending, asynchronous=False)
        except KafkaException as exc:
            log.warning("offset commit failed, kept for the next one: %s", exc)
            return False
        for tp in results:
            if tp.error is None and self._pending.get((tp.topic, tp.partition)) == tp.offset:
                del self._pending[(tp.topic, tp.partition)]
        return not self._pending

    def _lags(self) -> dict[Place, int]:
        assigned = self._consumer.assignment()
        if not assigned:
            return {}
        lags: dict[Place, int] = {}
        for tp in self._consumer.position(assigned):
            place = (tp.topic, tp.partition)
            low, high = self._consumer.get_watermark_offsets(tp, cached=True)
            # No message consumed since the assignment: the position is where the group was.
            position = tp.offset if tp.offset >= 0 else self._start.get(place, OFFSET_INVALID)
            if position < 0:
                position = low  # nothing committed yet: auto.offset.reset is earliest
            if high >= 0 and position >= 0:
                lags[place] = max(high - position, 0)
        return lags

    def _drained(self) -> bool:
        if self._pending and not self._commit_pending():
            return False
        meta = self._probe.list_topics(self.topic, timeout=KAFKA_TIMEOUT_S).topics.get(self.topic)
        if meta is None:
            return True
        if meta.error is not None:
            # No such topic: nothing to drain. Any other error (a leader election): not yet.
            return meta.error.code() in _NO_TOPIC
        places = [TopicPartition(self.topic, p) for p in meta.partitions]
        committed = self._probe.committed(places, timeout=KAFKA_TIMEOUT_S)
        for tp in committed:
            low, high = self._probe.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=KAFKA_TIMEOUT_S
            )
            done = tp.offset if tp.offset != OFFSET_INVALID else low
            if done < high:
                return False
        return True

    def _close(self) -> None:
        try:
            self._commit_pending()
            self._consumer.close()
        finally:
            self._probe.close()

    # Rebalance callbacks: librdkafka calls them from inside consume(), between batches.

    def _on_assign(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        log.info("assigned %s", sorted(p.partition for p in partitions))
        if not partitions:
            return
        try:
            committed = self._probe.committed(partitions, timeout=KAFKA_TIMEOUT_S)
        except KafkaException as exc:
            log.warning("committed offsets unknown, lag is estimated: %s", exc)
            return
        for tp in committed:
            self._start[(tp.topic, tp.partition)] = tp.offset

    def _on_revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        log.info("revoked %s", sorted(p.partition for p in partitions))
        self._commit_pending()
        self._forget(partitions)

    def _on_lost(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        log.warning("lost %s", sorted(p.partition for p in partitions))
        self._forget(partitions)

    def _forget(self, partitions: list[TopicPartition]) -> None:
        places = [(p.topic, p.partition) for p in partitions]
        for place in places:
            self._pending.pop(place, None)
            self._start.pop(place, None)
        metrics.forget_partitions(places)
