"""The buyer's order endpoints: status, pay, cancel."""

from __future__ import annotations

import uuid

from starlette.requests import Request
from starlette.responses import Response

from domain.order_lifecycle import PayResult, cancel, order_status, pay, release_units
from gateway.errors import Conflict, NotFound, Unavailable
from gateway.responses import json_response
from gateway.services import Services
from kernel.ids import item_of
from shard_router import ShardUnavailable
from shard_router.stock_events import publish


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _order_id(request: Request) -> uuid.UUID:
    try:
        return uuid.UUID(request.path_params["order_id"])
    except ValueError:
        raise NotFound("ORDER_NOT_FOUND") from None


async def _still_in_flight(s: Services, order_id: uuid.UUID, user_id: int) -> int | None:
    """The item of an order Redis holds for this buyer but the writer has not stored yet."""
    item_id = item_of(str(order_id))
    item = await s.catalog.get(item_id) if item_id is not None else None
    if item is None:
        return None
    try:
        held = await s.router.buyer_order(item.id, item.shards, user_id)
    except ShardUnavailable:
        raise Unavailable() from None
    return item.id if held == str(order_id) else None


async def get_order(request: Request) -> Response:
    s = _services(request)
    user_id = s.verifier.user_id(request.headers.get("authorization"))
    order_id = _order_id(request)
    row = await order_status(s.pool, order_id)
    if row is not None and row["user_id"] == user_id:
        return json_response(
            {"orderId": str(order_id), "itemId": row["item_id"], "status": row["status"]}
        )
    if row is None:
        item_id = await _still_in_flight(s, order_id, user_id)
        if item_id is not None:
            return json_response({"orderId": str(order_id), "itemId": item_id, "status": "PENDING"})
    raise NotFound("ORDER_NOT_FOUND")


async def _not_stored(s: Services, order_id: uuid.UUID, user_id: int) -> Conflict | NotFound:
    if await _still_in_flight(s, order_id, user_id) is not None:
        return Conflict("ORDER_PROCESSING", retry_after=1)
    return NotFound("ORDER_NOT_FOUND")


async def pay_order(request: Request) -> Response:
    s = _services(request)
    user_id = s.verifier.user_id(request.headers.get("authorization"))
    order_id = _order_id(request)
    result = await pay(s.pool, order_id, user_id)
    if result is PayResult.PAID:
        return json_response({"orderId": str(order_id), "status": "PAID"})
    if result is PayResult.EXPIRED:
        raise Conflict("ORDER_EXPIRED")
    if result is PayResult.FAILED:
        raise Conflict("ORDER_FAILED")
    raise await _not_stored(s, order_id, user_id)


async def cancel_order(request: Request) -> Response:
    s = _services(request)
    user_id = s.verifier.user_id(request.headers.get("authorization"))
    order_id = _order_id(request)
    ended = await cancel(s.pool, order_id, user_id)
    if ended is not None:
        for item_id in await release_units(s.router, [ended]):
            s.flags.clear(item_id)
            await publish(s.router.client, "restock", item_id)
        return json_response({"orderId": str(order_id), "status": "CANCELLED"})
    row = await order_status(s.pool, order_id)
    if row is None or row["user_id"] != user_id:
        raise await _not_stored(s, order_id, user_id)
    if row["status"] == "CANCELLED":
        return json_response({"orderId": str(order_id), "status": "CANCELLED"})
    raise Conflict(f"ORDER_{row['status']}")
