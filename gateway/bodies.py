"""The JSON bodies the gateway answers with, as msgspec types: gateway/openapi.py publishes their
schemas, and a handler that encodes one of them answers exactly what the document says.

Request bodies are the domain's wire types (domain/sales.py, domain/vouchers.py), which the
handlers decode with. ``forbid_unknown_fields`` makes each schema closed, so a field a handler
adds without adding it here fails the contract test instead of going undocumented. Optional
fields are ``UNSET`` (left out), never ``null``.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType

from shard_router import ShardState

Moment = Annotated[dt.datetime, msgspec.Meta(tz=True)]  # ISO 8601 with its offset: "date-time"


class _Body(msgspec.Struct, forbid_unknown_fields=True, rename="camel"): ...


class Error(_Body):
    """Every refusal: ``error`` is a stable code (gateway/errors.py); some carry more."""

    error: str
    order_id: str | UnsetType = UNSET  # ALREADY_PURCHASED: the buyer's order
    detail: str | UnsetType = UNSET  # INVALID_REQUEST, NOT_READY_TO_ARM: what was wrong
    reason: Literal["EXPIRED", "NOT_STARTED", "BELOW_MIN_ORDER"] | UnsetType = UNSET
    redis: bool | UnsetType = UNSET  # NOT_READY: which dependency is not
    kafka: bool | UnsetType = UNSET
    difficulty: int | UnsetType = UNSET  # PROOF_OF_WORK_REQUIRED: zero bits asked


class Health(_Body):
    status: Literal["ok"]


class Ready(_Body):
    status: Literal["ready"]
    redis: bool
    kafka: bool


OrderStatus = Literal["PENDING", "PAID", "EXPIRED", "CANCELLED", "FAILED"]


class OrderAccepted(_Body):
    """202: the unit is the buyer's; the order is on its way to the database."""

    order_id: str
    status: Literal["PENDING"]


class Order(_Body):
    order_id: str
    item_id: int
    status: OrderStatus


class OrderPaid(_Body):
    order_id: str
    status: Literal["PAID"]


class OrderCancelled(_Body):
    order_id: str
    status: Literal["CANCELLED"]


class CreatedItem(_Body):
    item_id: int
    product_id: str
    quantity: int
    shards: int


class SaleCreated(_Body):
    sale_id: int
    items: list[CreatedItem]


class ArmedItem(_Body):
    item_id: int
    shards: int
    units: int
    held: int


class SaleArmed(_Body):
    sale_id: int
    items: list[ArmedItem]


class ItemCounters(_Body):
    item_id: int
    quantity: int
    sold: int
    paused: bool
    units_left: int
    shards: list[ShardState]  # the shard router's own record


class Reservation(_Body):
    order_id: str
    discount_amount: int


class ReservationConfirmed(_Body):
    order_id: str
    status: Literal["CONFIRMED"]


class ReservationReleased(_Body):
    order_id: str
    status: Literal["RELEASED"]


class Voucher(_Body):
    code: str
    discount_amount: int
    min_order_amount: int
    total_limit: int
    per_customer_limit: int
    starts_at: Moment
    ends_at: Moment
    is_flash: bool


class VoucherCreated(Voucher):
    """A flash voucher is armed at once; when Redis cannot take it, ``armed`` is false and
    ``armError`` says why (``POST /admin/vouchers/{code}/arm`` does it later)."""

    armed: bool | UnsetType = UNSET
    remaining: int | UnsetType = UNSET
    held: int | UnsetType = UNSET
    in_flight: int | UnsetType = UNSET
    arm_error: str | UnsetType = UNSET


class VoucherArmed(_Body):
    code: str
    remaining: int
    held: int
    in_flight: int


class VoucherInRedis(_Body):
    node: str
    remaining: int | None  # null: not loaded
    holds: int
    customers: int
    outbox: int
    ended: int


class VoucherCounters(Voucher):
    used_count: int
    reserved: int
    confirmed: int
    released: int
    expired: int
    failed: int
    redis: VoucherInRedis | UnsetType = UNSET  # flash vouchers only


class QueueTicket(_Body):
    """A place in a sale's waiting room: ``ticket`` goes in ``X-Queue-Ticket`` of each poll.
    ``place`` is absent for who joined before the start (places are drawn at the start)."""

    ticket: str
    starts_at: Moment
    place: int | UnsetType = UNSET


class QueueStatus(_Body):
    """A poll's answer: WAITING (poll again after ``retryAfterSeconds``, also the Retry-After
    header) or ADMITTED (``admission`` goes in ``X-Admission`` of the purchase, until
    ``admissionExpiresAt``). ``ticket`` replaces the one the client holds."""

    state: Literal["WAITING", "ADMITTED"]
    ticket: str
    place: int | UnsetType = UNSET
    ahead: int | UnsetType = UNSET
    estimated_wait_seconds: int | UnsetType = UNSET
    retry_after_seconds: int | UnsetType = UNSET
    admission: str | UnsetType = UNSET
    admission_expires_at: Moment | UnsetType = UNSET
