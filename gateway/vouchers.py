"""The order service's voucher endpoints, behind the service token.

    POST   /vouchers/{code}/reservations                      take a use   → 201
    POST   /vouchers/{code}/reservations/{orderId}/confirm    RESERVED → CONFIRMED
    DELETE /vouchers/{code}/reservations/{orderId}            the use goes back

Reserve runs cheapest first: service token → body → voucher config (cached) → eligibility
(window, minimum order), then one of two paths, each idempotent by (code, orderId), the key of
a reservation. An orderId is the first customer's who took a use under it, on any voucher, and
carries one use in all unless ``voucher_order_combines`` lets it carry one of each voucher: a
claim on ``{voucher-order:<orderId>}`` (its own key: the vouchers may be on any node) is taken
before either path takes a use, and settled after it.
- flash: local OUT-OF-STOCK flag (no use is taken: the orderId's holder and owner answer) →
  in-flight cap → claim → one Lua call on ``{voucher:<code>}`` → settle → Kafka acknowledgement
  (the writer stores the redemption);
- ordinary: claim → one PostgreSQL transaction that also records the owner
  (domain/voucher_lifecycle.py) → settle.
Confirm and release act on the database for both kinds; a flash use goes back to Redis after.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
from starlette.requests import Request
from starlette.responses import Response

from domain.voucher_lifecycle import Transition, confirm, release, reserve_ordinary
from domain.vouchers import (
    Outcome,
    ReservationRequest,
    Voucher,
    decode_reservation,
    valid_order_id,
)
from gateway import metrics
from gateway.catalog import CatalogUnavailable
from gateway.errors import ApiError, Conflict, NotEligible, NotFound, Unavailable
from gateway.requests import decode_body, path_param, require_bearer, services, voucher_code
from gateway.responses import json_response
from gateway.services import Services
from kernel.events import VoucherReserved, encode
from kernel.failpoints import failpoint
from shard_router import ShardUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_BODY = 64 * 1024
DB_DEADLINE_S = 5.0
_DB_UNAVAILABLE = (
    CatalogUnavailable,
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.TransactionRollbackError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
)
# Every refusal of a reserve call (a fresh error each time: a raised instance keeps its traceback).
_REFUSALS: dict[Outcome, tuple[type[ApiError], str]] = {
    Outcome.OUT_OF_STOCK: (Conflict, "OUT_OF_STOCK"),
    Outcome.ALREADY_USED: (Conflict, "ALREADY_USED"),
    Outcome.ORDER_ID_CONFLICT: (Conflict, "ORDER_ID_CONFLICT"),
    Outcome.ENDED: (Conflict, "RESERVATION_EXPIRED"),
    Outcome.NOT_LOADED: (Unavailable, "VOUCHER_NOT_ARMED"),
    Outcome.NOT_FOUND: (NotFound, "VOUCHER_NOT_FOUND"),
}
# What a confirm that did not happen answers, when the database has the reservation.
_CONFIRM_REFUSALS = {
    Transition.ENDED: "RESERVATION_EXPIRED",
    Transition.FAILED: "RESERVATION_FAILED",
}


def _authorized(request: Request) -> Services:
    return require_bearer(request, services(request).cfg.service_token)


async def _db(call: Awaitable[T]) -> T:
    """A database call under a deadline; an outage is a 503, never a guess."""
    try:
        async with asyncio.timeout(DB_DEADLINE_S):
            return await call
    except _DB_UNAVAILABLE as exc:
        log.warning("voucher database call failed: %r", exc)
        raise Unavailable() from None


async def _voucher(s: Services, request: Request) -> Voucher:
    voucher = await _db(s.vouchers.get(voucher_code(request)))
    if voucher is None:
        raise NotFound("VOUCHER_NOT_FOUND")
    return voucher


def _order_id(request: Request) -> str:
    return path_param(request, "order_id", _valid_order_id, "RESERVATION_NOT_FOUND")


def _valid_order_id(order_id: str) -> str | None:
    return order_id if valid_order_id(order_id) else None


async def _reservation_request(request: Request) -> ReservationRequest:
    return await decode_body(request, decode_reservation, MAX_BODY)


# POST /vouchers/{code}/reservations


async def reserve(request: Request) -> Response:
    kind = "unknown"
    try:
        s = _authorized(request)
        voucher = await _voucher(s, request)
        kind = "flash" if voucher.is_flash else "ordinary"
        wanted = await _reservation_request(request)
        reason = voucher.ineligible(wanted.order_amount, time.time())
        if reason is not None:
            raise NotEligible(reason=reason.value)
        if voucher.is_flash:
            outcome, discount = await _reserve_flash(s, voucher, wanted), voucher.discount_amount
        else:
            outcome, discount = await _as_owner(s, voucher.code, wanted, _reserve_ordinary)
    except ApiError as error:
        metrics.VOUCHER_RESERVATIONS.labels(kind, error.code.lower()).inc()
        raise
    metrics.VOUCHER_RESERVATIONS.labels(kind, outcome.value.lower()).inc()
    if outcome in (Outcome.RESERVED, Outcome.REPLAY):
        return json_response({"orderId": wanted.order_id, "discountAmount": discount}, status=201)
    refusal, code = _REFUSALS[outcome]
    raise refusal(code)


Taker = Callable[[Services, str, ReservationRequest], Awaitable[tuple[Outcome, int]]]
# The outcomes after which a use may be held under the orderId: its claim stays for good.
_HOLDING = (Outcome.RESERVED, Outcome.REPLAY)


async def _as_owner(
    s: Services, code: str, wanted: ReservationRequest, take: Taker
) -> tuple[Outcome, int]:
    """``take`` a use as the orderId's owner: claim it first, settle it once decided (a take
    whose outcome is not known keeps the claim, as a use may be held)."""
    try:
        claimed = await s.voucher_store.claim_order(
            wanted.order_id, wanted.customer_id, code, bool(s.cfg.voucher_order_combines)
        )
    except ShardUnavailable as exc:
        log.warning("claim of order %s: %s", wanted.order_id, exc)
        raise Unavailable() from None
    if not claimed:
        return Outcome.ORDER_ID_CONFLICT, 0
    held = True
    try:
        outcome, discount = await take(s, code, wanted)
        held = outcome in _HOLDING
        return outcome, discount
    finally:
        try:
            await s.voucher_store.settle_order(wanted.order_id, held)
        except ShardUnavailable as exc:  # the claim stays: the orderId stays this customer's
            log.warning("settle of order %s: %s", wanted.order_id, exc)


async def _reserve_ordinary(
    s: Services, code: str, wanted: ReservationRequest
) -> tuple[Outcome, int]:
    combine = bool(s.cfg.voucher_order_combines)
    hold = s.cfg.voucher_hold_seconds
    reserved = await _db(reserve_ordinary(s.pool, code, wanted, hold, combine))
    return reserved.outcome, reserved.discount_amount


async def _flagged(s: Services, code: str, wanted: ReservationRequest) -> Outcome:
    """The answer under the out-of-stock flag, which takes no use: a retry of a reservation
    that holds a use gets its first answer, an orderId that is another customer's (on this
    voucher or any) a conflict. Two HGETs in one round trip, far cheaper than the script."""
    try:
        holder, owner = await s.voucher_store.holder_and_owner(code, wanted.order_id)
    except ShardUnavailable:
        raise Unavailable() from None
    if holder == wanted.customer_id:
        return Outcome.REPLAY
    if holder is not None or owner not in (None, wanted.customer_id):
        return Outcome.ORDER_ID_CONFLICT
    metrics.VOUCHER_OUT_OF_STOCK_FLAG_HITS.inc()
    return Outcome.OUT_OF_STOCK


async def _reserve_flash(s: Services, voucher: Voucher, wanted: ReservationRequest) -> Outcome:
    if s.voucher_flags.is_out(voucher.code):
        return await _flagged(s, voucher.code, wanted)
    if s.inflight >= s.cfg.inflight_cap:
        metrics.SHED.inc()
        raise Unavailable()
    if not s.producer.available:
        raise Unavailable()  # Kafka could not acknowledge: take no use (see purchase.py)
    s.inflight += 1
    try:
        now_ms = int(time.time() * 1000)
        payload = encode(
            VoucherReserved(
                wanted.order_id,
                voucher.code,
                wanted.customer_id,
                wanted.order_amount,
                voucher.discount_amount,
                now_ms,
                now_ms + s.cfg.voucher_hold_seconds * 1000,
            )
        )
        outcome, _ = await _as_owner(s, voucher.code, wanted, _take_flash(voucher, payload))
        return outcome
    finally:
        s.inflight -= 1


def _take_flash(voucher: Voucher, payload: bytes) -> Taker:
    async def take(s: Services, code: str, wanted: ReservationRequest) -> tuple[Outcome, int]:
        try:
            taken = await s.voucher_store.reserve(
                code, wanted.customer_id, wanted.order_id, voucher.per_customer_limit, payload
            )
        except ShardUnavailable as exc:
            log.warning("reserve of voucher %s: %s", code, exc)
            raise Unavailable() from None
        if taken.outcome is Outcome.RESERVED:
            metrics.VOUCHER_REMAINING.labels(code).set(taken.remaining)
            failpoint("gateway.after_voucher_reserve")
            await s.voucher_hand_off.send(code, wanted.order_id, payload, None)
        elif taken.outcome is Outcome.OUT_OF_STOCK:
            metrics.VOUCHER_REMAINING.labels(code).set(0)
            s.voucher_flags.mark(code)
        return taken.outcome, voucher.discount_amount

    return take


# POST /vouchers/{code}/reservations/{orderId}/confirm


async def confirm_reservation(request: Request) -> Response:
    return await _transition(request, "confirm", _confirm)


async def _confirm(s: Services, voucher: Voucher, order_id: str) -> Response:
    result = await _db(confirm(s.pool, voucher.code, order_id))
    if result is Transition.DONE:
        return json_response({"orderId": order_id, "status": "CONFIRMED"})
    if result in _CONFIRM_REFUSALS:
        raise Conflict(_CONFIRM_REFUSALS[result])
    raise await _not_stored(s, voucher, order_id)


# DELETE /vouchers/{code}/reservations/{orderId}


async def release_reservation(request: Request) -> Response:
    return await _transition(request, "release", _release)


async def _release(s: Services, voucher: Voucher, order_id: str) -> Response:
    result, _ = await _db(release(s.pool, voucher.code, order_id))
    if result is Transition.DONE:
        if voucher.is_flash:
            # Also when the database had already ended it: a retry heals a Redis release that
            # failed after the commit (release is idempotent, and never retakes a use).
            try:
                if await s.voucher_store.release(voucher.code, order_id):
                    s.voucher_flags.clear(voucher.code)
            except ShardUnavailable as exc:
                log.warning("release of voucher use %s left to reconciliation: %s", order_id, exc)
        return json_response({"orderId": order_id, "status": "RELEASED"})
    if result is Transition.CONFIRMED:
        raise Conflict("ALREADY_CONFIRMED")
    raise await _not_stored(s, voucher, order_id)


async def _transition(request: Request, action: str, step: Any) -> Response:
    try:
        s = _authorized(request)
        voucher = await _voucher(s, request)
        response: Response = await step(s, voucher, _order_id(request))
    except ApiError as error:
        metrics.VOUCHER_TRANSITIONS.labels(action, error.code.lower()).inc()
        raise
    metrics.VOUCHER_TRANSITIONS.labels(action, "done").inc()
    return response


async def _not_stored(s: Services, voucher: Voucher, order_id: str) -> ApiError:
    """No row for it: a flash use Redis holds is still on its way to the database."""
    if voucher.is_flash:
        try:
            held = await s.voucher_store.holds_order(voucher.code, order_id)
        except ShardUnavailable:
            return Unavailable()
        if held:
            return Conflict("RESERVATION_PROCESSING", retry_after=1)
    return NotFound("RESERVATION_NOT_FOUND")
