"""Voucher reservations in PostgreSQL: the ordinary (non-flash) reserve, confirm, release and
expiry. A reservation is known by (voucher code, orderId); the orderId itself belongs to the
first customer who took a use under it (``voucher_order``), and carries one voucher's use unless
the caller lets orders combine vouchers (``voucher_order_combines``). Every transition
is one ``UPDATE … RETURNING`` by (code, orderId) (two callers racing on one reservation see one
winner), and ``used_count`` moves in the same transaction as the status. A flash use goes back
to Redis only after the transaction that ended it committed.

``used_count`` counts the RESERVED and CONFIRMED uses of a voucher; the table's CHECK keeps it
within ``[0, total_limit]``.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass

import asyncpg

from domain.give_back import give_back
from domain.ports import UseReleaser
from domain.vouchers import Outcome, ReservationRequest

ACTIVE = ("RESERVED", "CONFIRMED")

_LOCK = """
select discount_amount, per_customer_limit, is_flash from voucher where code = $1 for update
"""
# Read after the lock, so both see every reservation committed before it was granted.
_EXISTING = """
select (select row(customer_id, status, discount_amount)
        from voucher_redemption where voucher_code = $1 and order_id = $2) as existing,
       (select count(*) from voucher_redemption
        where voucher_code = $1 and customer_id = $3 and status in ('RESERVED', 'CONFIRMED'))
        as active
"""
_TAKE = """
with taken as (
    update voucher set used_count = used_count + 1
    where code = $1 and used_count < total_limit
    returning code
)
insert into voucher_redemption
    (voucher_code, order_id, customer_id, order_amount, discount_amount, status,
     reserved_at, expires_at)
select code, $2, $3, $4, $5, 'RESERVED', now(), now() + make_interval(secs => $6) from taken
returning id
"""


# The orderId's owner (migrations/0005), its row locked to the end of the transaction: every
# reserve under one orderId, on any voucher, waits for the one before it.
_OWNER = """
insert into voucher_order (order_id, customer_id) values ($1, $2)
on conflict (order_id) do update set order_id = excluded.order_id
returning customer_id, xmax = 0 as fresh
"""
# One use per order: the orderId's use on another voucher, in any state (an ended one included,
# as a released orderId is never retaken on its own voucher either).
_ELSEWHERE = """
select exists (select 1 from voucher_redemption where order_id = $1 and voucher_code <> $2)
"""


@dataclass(frozen=True, slots=True)
class Reserved:
    outcome: Outcome
    discount_amount: int = 0


def _replay_of(existing: asyncpg.Record | None, customer_id: int) -> Reserved | None:
    """The answer a (code, orderId) that is already stored gets, or None when it is new."""
    if existing is None:
        return None
    stored_customer, status, discount = existing
    if stored_customer != customer_id:
        return Reserved(Outcome.ORDER_ID_CONFLICT)
    if status in ACTIVE:
        return Reserved(Outcome.REPLAY, discount)
    return Reserved(Outcome.ENDED)


async def reserve_ordinary(
    pool: asyncpg.Pool,
    code: str,
    request: ReservationRequest,
    hold_seconds: int,
    combine: bool = False,
) -> Reserved:
    """One transaction: lock the voucher row, then the orderId's owner (another customer's is a
    conflict; with ``combine`` off, so is a use on another voucher), the orderId's first answer,
    the customer's count, the guarded ``used_count`` advance and the redemption row. An owner
    row written here for a reserve that took nothing is taken back with it."""
    try:
        async with pool.acquire() as conn, conn.transaction():
            voucher = await conn.fetchrow(_LOCK, code)
            if voucher is None:
                return Reserved(Outcome.NOT_FOUND)
            owner = await conn.fetchrow(_OWNER, request.order_id, request.customer_id)
            if owner["customer_id"] != request.customer_id:
                return Reserved(Outcome.ORDER_ID_CONFLICT)
            reserved = await _reserve_as_owner(conn, code, request, hold_seconds, combine, voucher)
            if owner["fresh"] and reserved.outcome is not Outcome.RESERVED:
                await conn.execute(
                    "delete from voucher_order where order_id = $1", request.order_id
                )
            return reserved
    except asyncpg.UniqueViolationError:
        # The same (code, orderId) went in meanwhile by a path that does not take the voucher
        # lock (none does today): it is someone else's until a retry reads it.
        return Reserved(Outcome.ORDER_ID_CONFLICT)


async def _reserve_as_owner(
    conn: asyncpg.Connection,
    code: str,
    request: ReservationRequest,
    hold_seconds: int,
    combine: bool,
    voucher: asyncpg.Record,
) -> Reserved:
    """The reserve once the voucher and the orderId (this customer's) are locked."""
    row = await conn.fetchrow(_EXISTING, code, request.order_id, request.customer_id)
    replay = _replay_of(row["existing"], request.customer_id)
    if replay is not None:
        return replay
    if not combine and await conn.fetchval(_ELSEWHERE, request.order_id, code):
        return Reserved(Outcome.ORDER_ID_CONFLICT)
    if row["active"] >= voucher["per_customer_limit"]:
        return Reserved(Outcome.ALREADY_USED)
    taken = await conn.fetchval(
        _TAKE,
        code,
        request.order_id,
        request.customer_id,
        request.order_amount,
        voucher["discount_amount"],
        float(hold_seconds),
    )
    if taken is None:
        return Reserved(Outcome.OUT_OF_STOCK)
    return Reserved(Outcome.RESERVED, voucher["discount_amount"])


class Transition(enum.Enum):
    DONE = "DONE"  # the transition happened now, or had already happened (idempotent)
    ENDED = "ENDED"  # released or expired (or past its hold window): too late to confirm
    FAILED = "FAILED"  # the writer refused this flash use
    CONFIRMED = "CONFIRMED"  # a confirmed use is spent: it cannot be released
    NOT_FOUND = "NOT_FOUND"  # no such reservation of this voucher (maybe still in Kafka)


@dataclass(frozen=True, slots=True)
class EndedUse:
    """A use that just went back in the database; a flash one must go back in Redis too."""

    code: str
    order_id: str
    customer_id: int
    is_flash: bool


# A transition's UPDATE did not match, yet the row read just after it is RESERVED and live: the
# writer inserted it after the UPDATE's snapshot was taken (any concurrent transition has
# committed by then: the UPDATE waited for its lock). Running the UPDATE again settles it.
_ATTEMPTS = 3


async def _status(pool: asyncpg.Pool, code: str, order_id: str) -> tuple[str | None, bool]:
    """The reservation's status, and whether it is RESERVED within its hold window."""
    row = await pool.fetchrow(
        "select status, status = 'RESERVED' and expires_at > now() as live"
        " from voucher_redemption where order_id = $1 and voucher_code = $2",
        order_id,
        code,
    )
    return (None, False) if row is None else (row["status"], row["live"])


async def confirm(pool: asyncpg.Pool, code: str, order_id: str) -> Transition:
    """RESERVED (within its hold window) → CONFIRMED; confirming twice answers the same."""
    for _ in range(_ATTEMPTS):
        confirmed = await pool.fetchval(
            "update voucher_redemption set status = 'CONFIRMED', updated_at = now()"
            " where order_id = $1 and voucher_code = $2 and status = 'RESERVED'"
            " and expires_at > now() returning id",
            order_id,
            code,
        )
        if confirmed is not None:
            return Transition.DONE
        status, live = await _status(pool, code, order_id)
        if not live:
            break
    if status is None:
        return Transition.NOT_FOUND
    if status == "CONFIRMED":
        return Transition.DONE
    if status == "FAILED":
        return Transition.FAILED
    return Transition.ENDED  # RELEASED, EXPIRED, or RESERVED past its window


_RELEASE = """
with ended as (
    update voucher_redemption set status = 'RELEASED', updated_at = now()
    where order_id = $1 and voucher_code = $2 and status = 'RESERVED'
    returning voucher_code, order_id, customer_id
), lowered as (
    update voucher v set used_count = v.used_count - 1
    from ended where v.code = ended.voucher_code
    returning v.is_flash
)
select ended.voucher_code, ended.order_id, ended.customer_id, lowered.is_flash
from ended, lowered
"""


async def release(
    pool: asyncpg.Pool, code: str, order_id: str
) -> tuple[Transition, EndedUse | None]:
    """RESERVED → RELEASED and ``used_count`` down by one, in one statement. Releasing twice
    answers DONE again without giving a second use back."""
    for _ in range(_ATTEMPTS):
        row = await pool.fetchrow(_RELEASE, order_id, code)
        if row is not None:
            return Transition.DONE, _ended_use(row)
        status, _ = await _status(pool, code, order_id)
        if status != "RESERVED":
            break
    if status is None:
        return Transition.NOT_FOUND, None
    if status == "CONFIRMED":
        return Transition.CONFIRMED, None
    if status == "RESERVED":
        raise RuntimeError(f"voucher use {order_id} stayed RESERVED through its release")
    return Transition.DONE, None  # RELEASED, EXPIRED or FAILED: the use is not held


def _ended_use(row: asyncpg.Record) -> EndedUse:
    return EndedUse(row["voucher_code"], row["order_id"], row["customer_id"], row["is_flash"])


# Due: held past the hold window. The one predicate of what expiry ends and of what its dry run
# counts, so the two cannot disagree.
_DUE = "status = 'RESERVED' and expires_at <= now()"
_EXPIRE = f"""
update voucher_redemption r set status = 'EXPIRED', updated_at = now()
where r.status = 'RESERVED' and r.id in (
    select id from voucher_redemption where {_DUE}
    order by expires_at limit $1 for update skip locked)
returning r.voucher_code, r.order_id, r.customer_id
"""
_DUE_PER_CODE = f"""
select voucher_code, count(*) as due from voucher_redemption where {_DUE}
group by voucher_code order by voucher_code
"""
_LOCK_VOUCHERS = """
select code, is_flash from voucher where code = any($1::text[]) order by code for update
"""
_LOWER = """
update voucher v set used_count = v.used_count - d.n
from unnest($1::text[], $2::integer[]) as d(code, n) where v.code = d.code
"""


async def expire_due_vouchers(pool: asyncpg.Pool, limit: int = 1000) -> list[EndedUse]:
    """RESERVED past the hold window → EXPIRED and ``used_count`` down, in one transaction.
    Skip-locked rows let two expiry jobs run at once without ending a reservation twice; the
    vouchers are locked in code order, as the writer locks them, so the two never deadlock."""
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(_EXPIRE, limit)
        if not rows:
            return []
        per_code = Counter(r["voucher_code"] for r in rows)
        codes = sorted(per_code)
        flash = {r["code"]: r["is_flash"] for r in await conn.fetch(_LOCK_VOUCHERS, codes)}
        await conn.execute(_LOWER, codes, [per_code[c] for c in codes])
    return [
        EndedUse(r["voucher_code"], r["order_id"], r["customer_id"], flash[r["voucher_code"]])
        for r in rows
    ]


async def due_uses_per_code(pool: asyncpg.Pool) -> dict[str, int]:
    """Voucher code → its held uses that ``expire_due_vouchers`` would end now; reads only."""
    return {r["voucher_code"]: r["due"] for r in await pool.fetch(_DUE_PER_CODE)}


async def release_uses(store: UseReleaser, ended: list[EndedUse]) -> set[str]:
    """After the commit: give each ended flash use back in Redis (idempotent); an ordinary use
    lives only in the database. Returns the codes that got a use back."""
    flash = [use for use in ended if use.is_flash]
    released = await give_back(flash, lambda use: store.release(use.code, use.order_id))
    return {use.code for use in released}
