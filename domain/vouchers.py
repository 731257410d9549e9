"""Vouchers: the wire types of the voucher API, the voucher row, and the outcomes a reservation
can have, shared by the gateway, the jobs, the writer and the CLI."""

from __future__ import annotations

import datetime as dt
import enum
import re
from dataclasses import dataclass
from typing import Annotated

import asyncpg
import msgspec

from domain.errors import DomainError
from domain.rules import BIGINT_MAX, Money, check_window

# The voucher table's CHECK. ``\Z``, not ``$``: msgspec searches with Python's re, where ``$``
# also matches before a final newline, which the CHECK refuses (a 500 instead of a 400).
CODE_PATTERN = r"^[A-Za-z0-9_-]{1,64}\Z"
ORDER_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}\Z"
_CODE = re.compile(CODE_PATTERN)
_ORDER_ID = re.compile(ORDER_ID_PATTERN)

Code = Annotated[str, msgspec.Meta(pattern=CODE_PATTERN)]


def valid_code(code: str) -> bool:
    return _CODE.fullmatch(code) is not None


def valid_order_id(order_id: str) -> bool:
    return _ORDER_ID.fullmatch(order_id) is not None


class NewVoucher(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """The admin's create request (``POST /admin/vouchers``, ``flashsale voucher create``)."""

    code: Code
    discount_amount: Annotated[int, msgspec.Meta(ge=1, le=BIGINT_MAX)]
    total_limit: Annotated[int, msgspec.Meta(ge=0, le=100_000_000)]
    starts_at: dt.datetime
    ends_at: dt.datetime
    min_order_amount: Money = 0
    per_customer_limit: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 1
    is_flash: bool = False

    def __post_init__(self) -> None:
        check_window(self.starts_at, self.ends_at)


class ReservationRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """The order service's reserve request: the customer is named in the body. The orderId is
    the order's own id, and the first customer's to take a use under it; an order may carry
    several vouchers, each reserved under it, only where ``voucher_order_combines`` is on."""

    customer_id: Annotated[int, msgspec.Meta(ge=1, le=BIGINT_MAX)]
    order_id: Annotated[str, msgspec.Meta(pattern=ORDER_ID_PATTERN)]
    order_amount: Money


decode_new_voucher = msgspec.json.Decoder(NewVoucher).decode
decode_reservation = msgspec.json.Decoder(ReservationRequest).decode


class Outcome(enum.Enum):
    """What a reserve call decided, on either path (Redis for flash, PostgreSQL otherwise)."""

    RESERVED = "RESERVED"  # a use was taken now
    REPLAY = "REPLAY"  # this orderId already holds a use for this customer: the first answer
    ALREADY_USED = "ALREADY_USED"  # the customer holds the per-customer limit
    OUT_OF_STOCK = "OUT_OF_STOCK"  # no use left
    # The orderId is another customer's (on this voucher or any), or, with one use per order,
    # it carries a use of another voucher.
    ORDER_ID_CONFLICT = "ORDER_ID_CONFLICT"
    ENDED = "ENDED"  # this orderId's reservation was released or expired; it is not retaken
    NOT_LOADED = "NOT_LOADED"  # a flash voucher Redis does not know (not armed, or lost): 503
    NOT_FOUND = "NOT_FOUND"  # no such voucher


class Ineligible(enum.Enum):
    NOT_STARTED = "NOT_STARTED"
    EXPIRED = "EXPIRED"
    BELOW_MIN_ORDER = "BELOW_MIN_ORDER"


@dataclass(frozen=True, slots=True)
class Voucher:
    code: str
    discount_amount: int
    min_order_amount: int
    total_limit: int
    per_customer_limit: int
    starts_at: float  # epoch seconds
    ends_at: float
    is_flash: bool

    def ineligible(self, order_amount: int, now: float) -> Ineligible | None:
        if now < self.starts_at:
            return Ineligible.NOT_STARTED
        if now >= self.ends_at:
            return Ineligible.EXPIRED
        if order_amount < self.min_order_amount:
            return Ineligible.BELOW_MIN_ORDER
        return None


SELECT_VOUCHER = """
select code, discount_amount, min_order_amount, total_limit, per_customer_limit, is_flash,
       extract(epoch from starts_at)::float8 as starts_at,
       extract(epoch from ends_at)::float8 as ends_at
from voucher
"""


def voucher_of(row: asyncpg.Record) -> Voucher:
    return Voucher(
        row["code"],
        row["discount_amount"],
        row["min_order_amount"],
        row["total_limit"],
        row["per_customer_limit"],
        row["starts_at"],
        row["ends_at"],
        row["is_flash"],
    )


async def fetch_voucher(pool: asyncpg.Pool, code: str) -> Voucher | None:
    row = await pool.fetchrow(SELECT_VOUCHER + " where code = $1", code)
    return None if row is None else voucher_of(row)


class VoucherExists(DomainError):
    """Another voucher has this code."""


async def create_voucher(pool: asyncpg.Pool, new: NewVoucher) -> Voucher:
    """Insert the voucher; raises VoucherExists when the code is taken."""
    try:
        row = await pool.fetchrow(
            "insert into voucher (code, discount_amount, min_order_amount, total_limit,"
            " per_customer_limit, starts_at, ends_at, is_flash)"
            " values ($1, $2, $3, $4, $5, $6, $7, $8)"
            " returning code, discount_amount, min_order_amount, total_limit,"
            " per_customer_limit, is_flash,"
            " extract(epoch from starts_at)::float8 as starts_at,"
            " extract(epoch from ends_at)::float8 as ends_at",
            new.code,
            new.discount_amount,
            new.min_order_amount,
            new.total_limit,
            new.per_customer_limit,
            new.starts_at,
            new.ends_at,
            new.is_flash,
        )
    except asyncpg.UniqueViolationError:
        raise VoucherExists(new.code) from None
    assert row is not None
    return voucher_of(row)
