"""The dead-letter topic: every message the writer will not store as an order lands here, with
why, before the batch's offsets are committed (idempotent producer, acks=all, flushed).

A dead letter is JSON: ``{"reason", "topic", "partition", "offset", "payload", "request_id"}``
and ``traceparent`` when the message carried one, the payload being the original message as text
(undecodable bytes escaped); the request id is the message's (kernel/request_context.py), and
the message's headers go along. Delivery is at least once: a
batch replayed after a crash may dead-letter the same record again; (topic, partition, offset)
identifies it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import msgspec
from confluent_kafka import KafkaException, Producer

from kernel.settings import Settings
from writer.batch import DeadLetter

log = logging.getLogger(__name__)

FLUSH_TIMEOUT_S = 10.0


class _Body(msgspec.Struct, frozen=True, omit_defaults=True):
    reason: str
    topic: str
    partition: int
    offset: int
    payload: str
    request_id: str
    traceparent: str | None = None


_encode = msgspec.json.Encoder().encode


def body(letter: DeadLetter) -> bytes:
    record = letter.record
    payload = (record.value or b"").decode("utf-8", errors="backslashreplace")
    context = record.context()
    return _encode(
        _Body(
            letter.reason,
            record.topic,
            record.partition,
            record.offset,
            payload,
            context.request_id,
            context.traceparent,
        )
    )


class DeadLetterProducer:
    def __init__(self, cfg: Settings) -> None:
        self.topic = cfg.deadletter_topic
        self._producer = Producer(
            {
                "bootstrap.servers": cfg.kafka_bootstrap,
                "client.id": "flashsale-writer-deadletter",
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": int(FLUSH_TIMEOUT_S * 1000),
            }
        )

    def publish(self, letters: list[DeadLetter]) -> list[DeadLetter]:
        """Produce and flush; returns the letters that were not acknowledged (blocking)."""
        if not letters:
            return []
        lock = threading.Lock()
        acked: set[int] = set()

        def delivered(index: int) -> Any:
            def callback(err: Any, _msg: Any) -> None:
                if err is None:
                    with lock:
                        acked.add(index)
                else:
                    log.warning("dead letter not delivered: %s", err)

            return callback

        for index, letter in enumerate(letters):
            try:
                self._producer.produce(
                    self.topic,
                    body(letter),
                    letter.record.key,
                    on_delivery=delivered(index),
                    headers=letter.record.headers,
                )
            except (BufferError, KafkaException) as exc:
                log.warning("dead letter not queued: %s", exc)
                self._producer.poll(0.1)
        self._producer.flush(FLUSH_TIMEOUT_S)
        with lock:
            return [letter for i, letter in enumerate(letters) if i not in acked]

    def close(self) -> None:
        self._producer.flush(FLUSH_TIMEOUT_S)
