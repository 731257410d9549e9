"""Pure: turn one batch of Kafka records into the rows one stream stores (orders, or flash voucher
uses: writer/orders.py, writer/vouchers.py) and records to dead-letter.

Everything PostgreSQL would refuse for its shape (a non-UUID id, an integer out of its column's
range, a timestamp no datetime can hold) is caught here, so one bad message can never make the
whole batch's transaction fail forever.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

import msgspec

from kernel.events import Event, decode
from kernel.request_context import Context, Headers, from_kafka

BIGINT = (-(2**63), 2**63 - 1)
SMALLINT = (0, 2**15 - 1)


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka message, detached from librdkafka (what the writer needs of it)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    # Its Kafka headers: the request id and trace context (kernel/request_context.py).
    headers: Headers | None = None

    def context(self) -> Context:
        return from_kafka(self.headers, self.key)


E = TypeVar("E", bound=Event)  # OrderPlaced, VoucherReserved


@dataclass(frozen=True, slots=True)
class Row(Generic[E]):
    """A valid event with its columns converted: first the three the sink decides by."""

    record: Record
    event: E
    key: Hashable  # the orderId as its table stores it
    target: int | str  # what it is counted against: an item, a voucher
    buyer: int
    rest: tuple[Any, ...]  # its other columns, in its Schema's order

    @property
    def order_id(self) -> str:
        return self.event.order_id


class RowKind(Protocol[E]):
    """How one stream turns an event into its row."""

    @property
    def noun(self) -> str: ...  # "order", "voucher use"

    def row(self, record: Record, event: Event) -> Row[E] | None:
        """None for an event of the other stream; raises InvalidEvent."""
        ...


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record bound for the dead-letter topic, with why; ``kind`` is a metrics label
    (poison, unsupported, invalid, unknown_item, unknown_voucher, refused, rejected)."""

    record: Record
    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class Batch(Generic[E]):
    rows: list[Row[E]]
    dead_letters: list[DeadLetter]
    # (topic, partition) -> the offset to commit: the last offset seen + 1.
    offsets: dict[tuple[str, int], int]


class InvalidEvent(ValueError):
    pass


def parse(records: Sequence[Record], kind: RowKind[E]) -> Batch[E]:
    """The rows of ``kind``; every other event, poison and invalid ones are dead letters."""
    rows: list[Row[E]] = []
    dead_letters: list[DeadLetter] = []
    offsets: dict[tuple[str, int], int] = {}
    for record in records:
        place = (record.topic, record.partition)
        offsets[place] = max(offsets.get(place, 0), record.offset + 1)
        try:
            event = decode(record.value or b"")
        except msgspec.MsgspecError as exc:
            dead_letters.append(DeadLetter(record, "poison", f"undecodable: {exc}"))
            continue
        try:
            row = kind.row(record, event)
        except InvalidEvent as exc:
            dead_letters.append(DeadLetter(record, "invalid", f"invalid {kind.noun}: {exc}"))
            continue
        if row is None:
            tag = type(event).__struct_config__.tag
            dead_letters.append(DeadLetter(record, "unsupported", f"unsupported event type: {tag}"))
        else:
            rows.append(row)
    return Batch(rows, dead_letters, offsets)


def in_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise InvalidEvent(f"{name} {value} is outside [{low}, {high}]")


def timestamp(name: str, ms: int) -> datetime:
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise InvalidEvent(f"{name} {ms} is not a representable time") from None
