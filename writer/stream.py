"""What differs between the writer's two streams, as one strategy: the orders topic and the
vouchers topic (flash voucher uses). The batched sink (writer/sink.py, its SQL in writer/sql.py),
its rules (writer/rules.py), the loop (writer/consumer.py) and the Redis settling
(writer/settle.py) are written once, against this: a stream brings its particulars (its event
type, its tables, its words and refusal reasons: data, both streams' side by side in
writer/streams.py) and its hooks (its rows' checks and its Redis calls: give a hold back, forfeit
it (no unit back), re-assert it: writer/orders.py, writer/vouchers.py)."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Hashable, Mapping, Set
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from prometheus_client import Counter

from kernel.events import Event
from shard_router import ShardRouter
from shard_router.reassert import Reasserted
from writer.batch import E, Record, Row
from writer.sql import Schema

K = TypeVar("K", bound=Hashable)  # names one outbox in Redis: an item's shard, a voucher

# The counting rows one transaction locked, by target, as read (an item's has its shards).
Locked = Mapping[Any, Mapping[str, Any]]


class Fate(enum.Enum):
    INSERTED = "inserted"  # stored now (PENDING, RESERVED)
    DUPLICATE = "duplicate"  # already stored (or earlier in this batch): nothing to do
    REFUSED = "refused"  # stored now, FAILED: dead-letter it, give back (or forfeit) its hold
    FAILED_BEFORE = "failed_before"  # stored FAILED by an earlier pass: give back again
    CONFLICT = "conflict"  # the (code, orderId) is another customer's: release, no row
    UNKNOWN_ITEM = "unknown_item"  # no such item: nothing stored, dead-letter only
    UNKNOWN_VOUCHER = "unknown_voucher"  # no such voucher: nothing stored, dead-letter only
    # PostgreSQL refused the row itself (SQLSTATE class 22 or 23): stored FAILED when it takes
    # that, dead-lettered, its hold given back (not a refusal for capacity)
    REJECTED = "rejected"


# Refusals, whose hold goes (and whose outbox entry with it)
GIVEN_BACK = (Fate.REFUSED, Fate.FAILED_BEFORE, Fate.CONFLICT, Fate.REJECTED)


@dataclass(frozen=True, slots=True)
class Decision(Generic[E]):
    row: Row[E]
    fate: Fate
    reason: str = ""
    # A refusal for the target's capacity: Redis granted a unit the database did not have, so
    # its hold is forfeited, never given back (which would sell it again, to be refused again).
    forfeit: bool = False
    # Stored and active after this batch (inserted now, or stored earlier and still active):
    # Redis must hold its unit, so it is re-asserted.
    active: bool = False


@dataclass(frozen=True, slots=True)
class Holder:
    """One row's hold in Redis, as the Redis calls name it (from its event or its stored row)."""

    order_id: str
    target: Any  # the item id, the voucher code
    buyer: int
    place: int | None  # where the unit is held: the item's shard it came from; None (a voucher)

    @property
    def hold(self) -> tuple[Any, str]:
        return self.target, self.order_id


# eq=False: streams compare (and hash) by identity, one instance each, not by their fields.
@dataclass(frozen=True, eq=False)
class Stream(ABC, Generic[E, K]):
    """One stream: its particulars are these fields (given by writer/streams.py's table), a
    subclass implements the hooks; one instance each (writer.streams.ORDERS, VOUCHERS)."""

    name: str  # "orders", "vouchers": a metrics label
    noun: str  # "order", "voucher use": in logs and dead-letter reasons; plural with an s
    event: type[E]  # the events it stores; the other stream's are not its own
    target_noun: str  # "item", "voucher": what a row is counted against, in refusals
    unit: str  # "unit", "use": what a target has a capacity of
    schema: Schema
    metric: Counter  # this stream's rows, by fate
    failpoints: str  # "<failpoints>.before_commit", "<failpoints>.after_commit"
    exhausted: str  # how exhausted_reason() begins: tells a stored capacity refusal apart

    @property
    def unknown(self) -> Fate:
        """The fate of a row whose target does not exist."""
        return Fate(f"unknown_{self.target_noun}")

    def row(self, record: Record, event: Event) -> Row[E] | None:
        """None for an event of the other stream; raises InvalidEvent."""
        return self.to_row(record, event) if isinstance(event, self.event) else None

    @abstractmethod
    def to_row(self, record: Record, event: E) -> Row[E]:
        """Its columns, converted and checked; raises InvalidEvent."""

    @abstractmethod
    def holder(self, row: Row[E]) -> Holder: ...

    def identity(self, row: Row[E]) -> Hashable:
        """What tells rows apart: the orderId, or (target, orderId) for a per-target schema."""
        return (row.target, row.key) if self.schema.per_target else row.key

    def stored_identity(self, stored: Mapping[str, Any]) -> Hashable:
        """The same, of a stored row read by the ``stored`` statement."""
        key = stored["order_key"]
        return (stored["order_target"], key) if self.schema.per_target else key

    def forfeits(self, reason: str) -> bool:
        """Was a stored refusal one for capacity (its hold forfeited, not given back)?"""
        return reason.startswith(self.exhausted)

    def unknown_reason(self, row: Row[E]) -> str:
        return f"unknown {self.target_noun} {row.target}"

    @abstractmethod
    def held_reason(self, row: Row[E], holders: Set[str], per_buyer: int) -> str:
        """Why a buyer who already holds ``per_buyer`` active rows of the target is refused."""

    def exhausted_reason(self, row: Row[E], capacity: int) -> str:
        t, unit = self.target_noun, self.unit
        return f"{self.exhausted}: {t} {row.target} has no {unit} left of {capacity}"

    def conflict(self, row: Row[E], stored: Mapping[str, Any]) -> str | None:
        """Why ``stored``, found under the row's identity, is not this row; None when it is."""
        return None

    # Redis, once the batch is stored: what a refusal gives back or forfeits, what a stored row
    # re-asserts, which outbox entries go. Each call is idempotent. ``locked`` holds the
    # counting rows the batch's transaction read (an item's shards).

    @abstractmethod
    def release(self, router: ShardRouter, holder: Holder, locked: Locked) -> Awaitable[bool]:
        """Give back what a refused (or ended) row holds, its unit included; whether it went
        back now."""

    @abstractmethod
    def forfeit(self, router: ShardRouter, holder: Holder, locked: Locked) -> Awaitable[bool]:
        """Drop a refused row's hold without its unit; whether a hold was dropped now."""

    @abstractmethod
    def reassert(
        self, router: ShardRouter, holder: Holder, locked: Locked
    ) -> Awaitable[Reasserted | None]:
        """Make Redis hold what the stored row holds; None when its target is not locked."""

    @abstractmethod
    def outbox(self, decision: Decision[E]) -> K | None:
        """The outbox holding the row's event, or None if it has none."""

    @abstractmethod
    def drop(self, router: ShardRouter, outbox: K, order_ids: list[str]) -> Awaitable[object]:
        """Drop these stored rows' events from their outbox."""
