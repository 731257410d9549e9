"""An idle writer's poll waits for one message up to IDLE_WAIT_S, not a batch's 50 ms, and the
message that ends the wait opens a batch gathered as a busy poll's. (A fake consumer: the
writer against Kafka is in test_writer.py.)"""

from __future__ import annotations

from typing import Any

from writer.source import IDLE_WAIT_S, EventSource

BATCH, BATCH_S = 100, 0.05


class Message:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return "orders"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"v"

    def headers(self) -> None:
        return None


class FakeConsumer:
    """Answers each consume() from a script of message counts; records (count, timeout)."""

    def __init__(self, answers: list[int]) -> None:
        self.answers = answers
        self.calls: list[tuple[int, float]] = []
        self.offset = 0

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        self.calls.append((num_messages, timeout))
        count = min(self.answers.pop(0), num_messages)
        self.offset += count
        return [Message(self.offset - count + i) for i in range(count)]


def _source(consumer: FakeConsumer) -> EventSource:
    source = EventSource.__new__(EventSource)  # no librdkafka client: nothing connects
    source.batch_size, source.batch_s, source.idle = BATCH, BATCH_S, False
    source._consumer = consumer  # type: ignore[assignment]  # noqa: SLF001
    return source


def test_an_idle_poll_waits_for_one_message_and_then_gathers_its_batch() -> None:
    consumer = FakeConsumer([0, 0, 1, 30, 5])
    source = _source(consumer)
    polled = [len(source._poll_batch()) for _ in range(4)]  # noqa: SLF001
    assert polled == [0, 0, 31, 5]
    assert consumer.calls == [
        (BATCH, BATCH_S),  # busy: a batch's wait
        (1, IDLE_WAIT_S),  # that found nothing: idle, wait for one
        (1, IDLE_WAIT_S),  # one came:
        (BATCH - 1, BATCH_S),  # the rest of its batch, as a busy poll gathers it
        (BATCH, BATCH_S),  # busy again
    ]
    assert not source.idle
