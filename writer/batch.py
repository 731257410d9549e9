"""Pure: turn one batch of Kafka records into orders (and, from the vouchers topic, flash voucher
uses) to store and records to dead-letter.

Everything PostgreSQL would refuse for its shape (a non-UUID id, an integer out of its column's
range, a timestamp no datetime can hold) is caught here, so one bad message can never make the
whole batch's transaction fail forever.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import msgspec

from domain.vouchers import valid_code, valid_order_id
from kernel.events import OrderPlaced, VoucherReserved, decode

_BIGINT = (-(2**63), 2**63 - 1)
_SMALLINT = (0, 2**15 - 1)


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka message, detached from librdkafka (what the writer needs of it)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Order:
    """A valid OrderPlaced with its columns already converted."""

    record: Record
    event: OrderPlaced
    id: uuid.UUID
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Redemption:
    """A valid VoucherReserved (a flash voucher use Redis granted) with its columns converted."""

    record: Record
    event: VoucherReserved
    reserved_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record bound for the dead-letter topic, with why; ``kind`` is a metrics label
    (poison, unsupported, invalid, unknown_item, unknown_voucher, refused, rejected)."""

    record: Record
    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class Batch:
    orders: list[Order]
    dead_letters: list[DeadLetter]
    # (topic, partition) -> the offset to commit: the last offset seen + 1.
    offsets: dict[tuple[str, int], int]
    redemptions: list[Redemption] = field(default_factory=list)


class InvalidOrder(ValueError):
    pass


def parse(records: Sequence[Record], vouchers_topic: str | None = None) -> Batch:
    """Orders from any topic but ``vouchers_topic``; voucher uses from that topic only."""
    orders: list[Order] = []
    redemptions: list[Redemption] = []
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
        from_vouchers = record.topic == vouchers_topic
        if isinstance(event, VoucherReserved) and from_vouchers:
            try:
                redemptions.append(to_redemption(record, event))
            except InvalidOrder as exc:
                reason = f"invalid voucher use: {exc}"
                dead_letters.append(DeadLetter(record, "invalid", reason))
            continue
        if not isinstance(event, OrderPlaced) or from_vouchers:
            tag = type(event).__struct_config__.tag
            dead_letters.append(DeadLetter(record, "unsupported", f"unsupported event type: {tag}"))
            continue
        try:
            orders.append(to_order(record, event))
        except InvalidOrder as exc:
            dead_letters.append(DeadLetter(record, "invalid", f"invalid order: {exc}"))
    return Batch(orders, dead_letters, offsets, redemptions)


def to_order(record: Record, event: OrderPlaced) -> Order:
    try:
        order_id = uuid.UUID(event.order_id)
    except ValueError:
        raise InvalidOrder(f"order_id {event.order_id!r} is not a UUID") from None
    _in_range("item_id", event.item_id, 1, _BIGINT[1])
    _in_range("user_id", event.user_id, *_BIGINT)
    _in_range("shard", event.shard, *_SMALLINT)
    _in_range("home_shard", event.home_shard, *_SMALLINT)
    return Order(
        record,
        event,
        order_id,
        _timestamp("created_at_ms", event.created_at_ms),
        _timestamp("expires_at_ms", event.expires_at_ms),
    )


def to_redemption(record: Record, event: VoucherReserved) -> Redemption:
    if not valid_order_id(event.order_id):
        raise InvalidOrder(f"order_id {event.order_id!r} is not a valid order id")
    if not valid_code(event.code):
        raise InvalidOrder(f"code {event.code!r} is not a valid voucher code")
    _in_range("customer_id", event.customer_id, 1, _BIGINT[1])
    _in_range("order_amount", event.order_amount, 0, _BIGINT[1])
    _in_range("discount_amount", event.discount_amount, 1, _BIGINT[1])
    return Redemption(
        record,
        event,
        _timestamp("reserved_at_ms", event.reserved_at_ms),
        _timestamp("expires_at_ms", event.expires_at_ms),
    )


def _in_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise InvalidOrder(f"{name} {value} is outside [{low}, {high}]")


def _timestamp(name: str, ms: int) -> datetime:
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise InvalidOrder(f"{name} {ms} is not a representable time") from None
