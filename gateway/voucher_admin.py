"""The admin API for vouchers, behind the admin token: create (a flash voucher is armed at once),
arm again (warm-up into Redis), read the counters of the database and of Redis."""

from __future__ import annotations

import datetime as dt
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from domain.errors import NotReady
from domain.voucher_arm import ArmedVoucher, arm_voucher
from domain.vouchers import Voucher, VoucherExists, create_voucher, decode_new_voucher
from gateway.arming import arm_errors
from gateway.errors import Conflict, NotFound, Unavailable
from gateway.requests import admin, decode_body, voucher_code
from gateway.responses import json_response
from gateway.services import Services
from shard_router import ShardUnavailable

MAX_BODY = 64 * 1024


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat()


def _voucher_json(v: Voucher) -> dict[str, Any]:
    return {
        "code": v.code,
        "discountAmount": v.discount_amount,
        "minOrderAmount": v.min_order_amount,
        "totalLimit": v.total_limit,
        "perCustomerLimit": v.per_customer_limit,
        "startsAt": _iso(v.starts_at),
        "endsAt": _iso(v.ends_at),
        "isFlash": v.is_flash,
    }


def _armed_json(armed: ArmedVoucher) -> dict[str, Any]:
    return {"remaining": armed.remaining, "held": armed.held, "inFlight": armed.in_flight}


async def _arm(s: Services, code: str) -> ArmedVoucher:
    with arm_errors():
        armed = await arm_voucher(s.pool, s.voucher_store, code)
    s.voucher_flags.clear(code)
    return armed


async def post_voucher(request: Request) -> Response:
    s = admin(request)
    new = await decode_body(request, decode_new_voucher, MAX_BODY)
    try:
        voucher = await create_voucher(s.pool, new)
    except VoucherExists:
        raise Conflict("VOUCHER_EXISTS") from None
    s.vouchers.remember(voucher)
    answer = _voucher_json(voucher)
    if voucher.is_flash:
        # Created either way; when Redis cannot take it now, POST …/arm does it later.
        try:
            answer |= {"armed": True, **_armed_json(await _arm(s, voucher.code))}
        except (Conflict, Unavailable) as exc:
            answer |= {"armed": False, "armError": exc.extra.get("detail", exc.code)}
    return json_response(answer, status=201)


async def arm(request: Request) -> Response:
    s = admin(request)
    code = voucher_code(request)
    voucher = await s.vouchers.get(code)
    if voucher is None:
        raise NotFound("VOUCHER_NOT_FOUND")
    if not voucher.is_flash:
        raise Conflict(NotReady.code, detail="not a flash voucher: it needs no arming")
    return json_response({"code": code, **_armed_json(await _arm(s, code))})


_COUNTERS = """
select v.used_count,
       count(r.id) filter (where r.status = 'RESERVED') as reserved,
       count(r.id) filter (where r.status = 'CONFIRMED') as confirmed,
       count(r.id) filter (where r.status = 'RELEASED') as released,
       count(r.id) filter (where r.status = 'EXPIRED') as expired,
       count(r.id) filter (where r.status = 'FAILED') as failed
from voucher v left join voucher_redemption r on r.voucher_code = v.code
where v.code = $1 group by v.code
"""


async def get_voucher(request: Request) -> Response:
    s = admin(request)
    code = voucher_code(request)
    voucher = await s.vouchers.get(code)
    row = await s.pool.fetchrow(_COUNTERS, code) if voucher is not None else None
    if voucher is None or row is None:
        raise NotFound("VOUCHER_NOT_FOUND")
    answer = _voucher_json(voucher) | {
        "usedCount": row["used_count"],
        "reserved": row["reserved"],
        "confirmed": row["confirmed"],
        "released": row["released"],
        "expired": row["expired"],
        "failed": row["failed"],
    }
    if voucher.is_flash:
        try:
            state = await s.voucher_store.state(code)
        except ShardUnavailable:
            raise Unavailable() from None
        answer["redis"] = {
            "node": state.node,
            "remaining": state.remaining,
            "holds": state.holds,
            "customers": state.customers,
            "outbox": state.outbox,
            "ended": state.ended,
        }
    return json_response(answer)
