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
import logging
import threading
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from gateway.broker_probe import BrokerProbes
from kernel.request_context import Headers
from kernel.settings import Settings

log = logging.getLogger(__name__)


class NeverSent(Exception):
    """No base shared with OutcomeUnknown: one handler for both would release a unit that
    may be sold."""


class OutcomeUnknown(Exception):
    """Apart from NeverSent on purpose (see NeverSent)."""


_BUSY_POLL_S = 0.001  # while acknowledgements are awaited: at most 1 ms added to a 202
_IDLE_POLL_S = 0.1  # otherwise: error, log and broker-state events still get served
_PROBE_DEADLINE_S = 0.25


class OrderProducer:
    """Delivery reports are served on the event loop's own thread: a 1 ms ``poll(0)`` timer
    while sends are waiting, so no thread hands reports over (a poller thread cost ~45 µs of
    the loop's CPU per order in GIL hand-offs and cross-thread wake-ups; bench.md).

    Sends to a topic go to one partition at a time, the next writable one every sticky window
    (2 × linger, as librdkafka's own sticky partitioner does for unkeyed messages), not to
    their key's partition: a linger window's orders then make one batch for one broker, not a
    batch for each of 12 partitions (librdkafka's broker threads ~15 → ~3 µs per order;
    the reserve_speed section of bench.md). Nothing reads the key's partition: each
    topic carries one kind of event, stored once per orderId wherever it lands."""

    def __init__(self, cfg: Settings) -> None:
        self.timeout_s = cfg.kafka_timeout_ms / 1000
        self._producer = Producer(
            {
                "bootstrap.servers": cfg.kafka_bootstrap,
                "acks": "all",
                # librdkafka does not default to idempotence: set it, so a retried batch is not
                # written twice by the broker.
                "enable.idempotence": True,
                "linger.ms": cfg.kafka_linger_ms,
                "batch.num.messages": 10000,
                "queue.buffering.max.messages": 100_000,  # bounded memory: beyond it, NeverSent
                "message.timeout.ms": cfg.kafka_timeout_ms,
                "compression.type": "lz4",
                "error_cb": self._error,
            }
        )
        # acks=all is refused below min.insync.replicas (2 of 3 brokers), whatever the cause.
        self._min_insync = cfg.kafka_min_insync_replicas or (2 if cfg.kafka_brokers >= 3 else 1)
        self._topics = tuple(dict.fromkeys((cfg.orders_topic, cfg.vouchers_topic)))
        self._health_interval_s = cfg.kafka_health_interval_ms / 1000
        # A healthy broker answers a probe in ~1 ms, ~50 ms on a starved 2-core box; a round
        # takes at most this, so a hang is seen within interval + deadline.
        self._probes = BrokerProbes(min(_PROBE_DEADLINE_S, self._health_interval_s))
        self.available = True  # until the first probe round says otherwise: readiness checks it
        self._watch: asyncio.Task[None] | None = None
        self._last_listed: dict[str, Any] = {}  # topic → its last metadata answer
        # Sends in the order of their deadlines: one sweep per poll, no timer per message.
        self._waiting: collections.deque[_Send] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._tick: asyncio.TimerHandle | None = None
        self._closing = False
        # Per topic: the partitions the last health round found writable (unknown: the key's
        # partition, librdkafka's choice), and the one in use with the loop time it ends.
        self._usable: dict[str, list[int]] = {}
        self._sticky: dict[str, tuple[int, float]] = {}
        self._sticky_s = max(2 * cfg.kafka_linger_ms, 1) / 1000
        self._turn = 0

    def _refresh_metadata(self) -> None:
        """Each topic's leaders and in-sync replicas, for the probe rounds (blocking, so on a
        worker thread). A request that fails (it went to a hung or dead broker) keeps the last
        answer: the probes judge its replicas afresh every round."""
        for topic in self._topics:
            try:
                self._last_listed[topic] = self._producer.list_topics(
                    topic, timeout=self._health_interval_s * 4
                )
            except KafkaException:
                pass

    def _judge(self, answered: dict[int, bool]) -> bool:
        """Each of our topics has a partition a send can be acknowledged on (``_writable``),
        judged from the last metadata and this round's probes (broker id → it answered); the
        writable ones are kept for ``partition()``.

        Metadata alone is late: SIGKILLed or hung brokers stay listed in sync until the
        controller fences them (broker.session.timeout.ms, seconds); with two of three gone
        every send meanwhile waits out the Kafka deadline with a unit held. librdkafka's broker
        states are no substitute: it connects only to the leaders it needs, so a broker that
        came back is never seen "up". A probe answers both ways within the health interval."""
        in_sync = True
        lost: dict[str, set[int]] = {}  # topic → partitions writable last round, no longer
        for topic in self._topics:
            listed = self._last_listed[topic]
            partitions = listed.topics[topic].partitions
            usable = [
                n for n, p in sorted(partitions.items()) if _writable(p, answered, self._min_insync)
            ]
            if gone := set(self._usable.get(topic, ())) - set(usable):
                lost[topic] = gone
                sticky = self._sticky.get(topic)
                if sticky is not None and sticky[0] in gone:
                    del self._sticky[topic]
            self._usable[topic] = usable
            # Sends go to writable partitions only (partition()): one is enough to sell.
            in_sync = in_sync and bool(usable)
        if lost and self._waiting:
            self._send_again(lost)
        return in_sync

    def partition(self, topic: str, now: float) -> int:
        """Where a send to ``topic`` at loop time ``now`` goes: the sticky partition, or -1
        (librdkafka's partitioner, by key) while the health rounds know no writable one."""
        sticky = self._sticky.get(topic)
        if sticky is not None and now < sticky[1]:
            return sticky[0]
        usable = self._usable.get(topic)
        if not usable:
            return -1
        self._turn += 1
        chosen = usable[self._turn % len(usable)]
        self._sticky[topic] = (chosen, now + self._sticky_s)
        return chosen

    def _brokers(self) -> dict[int, tuple[str, int]]:
        """Every broker the last metadata lists: id → address."""
        return {
            broker_id: (broker.host, int(broker.port))
            for listed in self._last_listed.values()
            for broker_id, broker in listed.brokers.items()
        }

    async def _watch_metadata(self) -> None:
        while not self._closing:
            await asyncio.to_thread(self._refresh_metadata)
            await asyncio.sleep(self._health_interval_s)

    async def _watch_health(self) -> None:
        """Probe rounds run apart from the metadata requests, which a hung broker holds for
        their whole timeout: a round takes at most the probe deadline."""
        assert self._loop is not None
        metadata = self._loop.create_task(self._watch_metadata())
        try:
            while not self._closing:
                if len(self._last_listed) == len(self._topics):  # else: keep what we knew
                    brokers = self._brokers()
                    answers = await self._probes.ask(brokers)
                    available = self._judge(answers)
                    if available != self.available:
                        log.warning(
                            "kafka %s",
                            "usable again"
                            if available
                            else "refusing purchases: "
                            "a partition lacks min.insync.replicas answering brokers",
                        )
                    self.available = available
                await asyncio.sleep(self._health_interval_s)
        finally:
            metadata.cancel()
            self._probes.close()

    def _error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self.available = False  # at once, not at the next metadata round

    async def send(
        self, topic: str, key: bytes, value: bytes, headers: Headers | None = None
    ) -> None:
        """``headers``: the message's Kafka headers (kernel/request_context.py), or none."""
        loop = self._loop or self._bind(asyncio.get_running_loop())
        now = loop.time()
        partition = self.partition(topic, now)
        # librdkafka reports a failure by message.timeout.ms; the sweep is the backstop.
        sent = _Send(loop.create_future(), topic, partition, key, value, now + self.timeout_s + 0.5)
        sent.headers = headers
        try:
            self._producer.produce(
                topic,
                value,
                key,
                partition=partition,
                on_delivery=partial(self._delivered, sent),
                headers=headers,
            )
        except (BufferError, KafkaException) as exc:
            raise NeverSent(str(exc)) from exc
        self._waiting.append(sent)
        if self._tick is None or self._tick.when() > now + _BUSY_POLL_S:
            self._schedule(loop, _BUSY_POLL_S)
        await sent.future

    def _send_again(self, lost: dict[str, set[int]]) -> None:
        """Sends awaiting a partition that just lost its leader or its replicas (a hang or a
        crash the round found after they went out) get a copy on a writable one, which answers
        for them once the controller has moved the gone broker out of its ISR (the fencing,
        ~3 s), where the first copy would wait for a leader that no longer answers. Under the
        first copy's deadline still. Both may be stored; the writer keeps one per orderId."""
        assert self._loop is not None
        now = self._loop.time()
        for sent in list(self._waiting):
            if sent.future.done() or sent.partition not in lost.get(sent.topic, ()):
                continue
            partition = self.partition(sent.topic, now)
            if partition < 0:
                continue
            try:
                self._producer.produce(
                    sent.topic,
                    sent.value,
                    sent.key,
                    partition=partition,
                    on_delivery=partial(self._delivered, sent),
                    headers=sent.headers,
                )
            except (BufferError, KafkaException):
                continue  # the first copy still stands
            sent.copies += 1
            sent.partition = partition  # its deadline stays: a buyer never waits longer

    def start(self) -> None:
        """Serve librdkafka's events from now on (not from the first send), so broker states
        are known before the first purchase decides whether it may take a unit."""
        loop = self._loop or self._bind(asyncio.get_running_loop())
        if self._tick is None:
            self._schedule(loop, _IDLE_POLL_S)
        if self._watch is None:
            self._watch = loop.create_task(self._watch_health())

    def _bind(self, loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        return loop

    def _schedule(self, loop: asyncio.AbstractEventLoop, delay_s: float) -> None:
        if self._tick is not None:
            self._tick.cancel()
        self._tick = loop.call_later(delay_s, self._poll)

    def _poll(self) -> None:
        self._tick = None
        if self._closing:
            return
        self._producer.poll(0)  # runs the delivery callbacks, on this thread
        assert self._loop is not None
        now = self._loop.time()
        waiting = self._waiting
        while waiting and (waiting[0].future.done() or waiting[0].deadline <= now):
            _settle(waiting.popleft().future, "no delivery report before the deadline")
        self._schedule(self._loop, _BUSY_POLL_S if waiting else _IDLE_POLL_S)

    def _delivered(self, sent: _Send, err: Any, _msg: Any) -> None:
        if threading.get_ident() == self._loop_thread:
            sent.reported(err)
        elif self._loop is not None:  # flush() at close runs callbacks on its own thread
            self._loop.call_soon_threadsafe(sent.reported, err)

    async def reachable(self, timeout_s: float = 1.0) -> bool:
        """Can we reach a broker? Asked on a worker thread: it may block for ``timeout_s``."""
        try:
            await asyncio.to_thread(self._producer.list_topics, timeout=timeout_s)
        except KafkaException:
            return False
        return True

    async def close(self, timeout_s: float = 5.0) -> None:
        """Flush what is queued (on a worker thread: flush blocks)."""
        self._closing = True
        if self._watch is not None:
            self._watch.cancel()
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        await asyncio.to_thread(self._producer.flush, timeout_s)


class _Send:
    """One message awaiting its acknowledgement, and how many of its copies are unreported."""

    __slots__ = ("copies", "deadline", "future", "headers", "key", "partition", "topic", "value")

    def __init__(
        self,
        future: asyncio.Future[None],
        topic: str,
        partition: int,
        key: bytes,
        value: bytes,
        deadline: float,
    ) -> None:
        self.future = future
        self.topic = topic
        self.partition = partition
        self.key = key
        self.value = value
        self.headers: Headers | None = None  # kept for a copy (_send_again)
        self.deadline = deadline
        self.copies = 1

    def reported(self, err: Any) -> None:
        """One copy's delivery report: the first acknowledgement answers; a failure does only
        once no other copy may still be acknowledged."""
        self.copies -= 1
        if err is None or self.copies <= 0:
            _settle(self.future, err)


def _writable(p: Any, answered: dict[int, bool], min_insync: int) -> bool:
    """Can a send to partition ``p`` be acknowledged with acks=all, now or once the controller
    fences a gone replica (broker.session.timeout.ms)? Its leader answers, and so do
    min.insync.replicas of those listed in sync: with fewer, nothing is acknowledged until a
    broker returns."""
    if p.leader < 0 or not answered.get(p.leader, False):
        return False  # no leader, or one that is fenced, unknown, hung or dead
    live = sum(answered.get(b, False) for b in p.isrs)
    # A topic of fewer replicas (a test's scratch topic) needs no more than it has.
    return live >= min(min_insync, len(p.replicas))


def _settle(future: asyncio.Future[None], err: Any) -> None:
    if future.done():
        return
    if err is None:
        future.set_result(None)
    else:
        future.set_exception(OutcomeUnknown(str(err)))
