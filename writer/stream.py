"""What differs between the writer's two streams, as one strategy: the orders topic
(writer/orders.py) and the vouchers topic (writer/vouchers.py, flash voucher uses). The batched
sink (writer/sink.py, its SQL in writer/sql.py), its rules (writer/rules.py) and the loop
(writer/consumer.py) are written once, against this: a stream brings its event type, its tables,
its refusal reasons and what a refusal gives back in Redis."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Hashable, Mapping, Set
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from prometheus_client import Counter

from kernel.events import Event
from shard_router import ShardRouter
from writer.batch import E, Record, Row
from writer.sql import Schema

K = TypeVar("K", bound=Hashable)  # names one outbox in Redis: an item's shard, a voucher

# The counting rows one transaction locked, by target, as read (an item's has its shards).
Locked = Mapping[Any, Mapping[str, Any]]


class Fate(enum.Enum):
    INSERTED = "inserted"  # stored now (PENDING, RESERVED)
    DUPLICATE = "duplicate"  # already stored (or earlier in this batch): nothing to do
    REFUSED = "refused"  # stored now, FAILED: dead-letter it and release its hold
    FAILED_BEFORE = "failed_before"  # stored FAILED by an earlier pass: release again
    CONFLICT = "conflict"  # the orderId is another voucher's or customer's: release, no row
    UNKNOWN_ITEM = "unknown_item"  # no such item: nothing stored, dead-letter only
    UNKNOWN_VOUCHER = "unknown_voucher"  # no such voucher: nothing stored, dead-letter only


RELEASED = (Fate.REFUSED, Fate.FAILED_BEFORE, Fate.CONFLICT)


@dataclass(frozen=True, slots=True)
class Decision(Generic[E]):
    row: Row[E]
    fate: Fate
    reason: str = ""


class Stream(ABC, Generic[E, K]):
    """One stream's particulars: a subclass sets these and implements the hooks; one instance
    each (writer.orders.ORDERS, writer.vouchers.VOUCHERS)."""

    noun: str  # "order", "voucher use": in logs and dead-letter reasons; plural with an s
    schema: Schema
    unknown: Fate  # the fate of a row whose target does not exist
    metric: Counter  # this stream's rows, by fate
    failpoints: str  # "<failpoints>.before_commit", "<failpoints>.after_commit"

    @abstractmethod
    def row(self, record: Record, event: Event) -> Row[E] | None:
        """None for an event of the other stream; raises InvalidEvent."""

    @abstractmethod
    def unknown_reason(self, row: Row[E]) -> str: ...

    @abstractmethod
    def held_reason(self, row: Row[E], holders: Set[str], per_buyer: int) -> str:
        """Why a buyer who already holds ``per_buyer`` active rows of the target is refused."""

    @abstractmethod
    def exhausted_reason(self, row: Row[E], capacity: int) -> str: ...

    def conflict(self, row: Row[E], stored: Mapping[str, Any]) -> str | None:
        """Why ``stored``, found under the row's orderId, is not this row; None when it is."""
        return None

    # Redis, once the batch is stored: what a refusal gives back, which outbox entries go.

    @abstractmethod
    def release(
        self, router: ShardRouter, decision: Decision[E], locked: Locked
    ) -> Awaitable[bool]:
        """Give back what a refused row holds (once); whether it went back now."""

    @abstractmethod
    def outbox(self, decision: Decision[E]) -> K | None:
        """The outbox holding the row's event, or None if it has none."""

    @abstractmethod
    def drop(self, router: ShardRouter, outbox: K, order_ids: list[str]) -> Awaitable[object]:
        """Drop these stored rows' events from their outbox."""
