"""The buyer's order endpoints: status, pay, cancel (each behind the per-address and per-buyer
limits of gateway/limits.py)."""

from __future__ import annotations

import uuid

from starlette.requests import Request
from starlette.responses import Response

from domain.order_lifecycle import PayResult, cancel, order_status, pay, release_units
from gateway.errors import Conflict, NotFound, Unavailable
from gateway.items import Item
from gateway.limits import buyer
from gateway.requests import database_id, path_param
from gateway.responses import json_response
from gateway.services import Services
from gateway.soldout import announce_restock
from kernel.ids import item_of, parse_order_id
from shard_router import ShardUnavailable

# What a payment that did not happen answers, when the database has the order.
_PAY_REFUSALS = {PayResult.EXPIRED: "ORDER_EXPIRED", PayResult.FAILED: "ORDER_FAILED"}


def _order_id(request: Request) -> uuid.UUID:
    return path_param(request, "order_id", parse_order_id, "ORDER_NOT_FOUND")


async def _held_order(s: Services, item: Item, user_id: int) -> str | None:
    """The orderId the buyer's home shard of ``item`` holds for them, if any."""
    try:
        return await s.router.buyer_order(item.id, item.shards, user_id)
    except ShardUnavailable:
        raise Unavailable() from None


async def _still_in_flight(s: Services, order_id: uuid.UUID, user_id: int) -> int | None:
    """The item of an order Redis holds for this buyer but the writer has not stored yet."""
    item_id = item_of(str(order_id))
    item = await s.catalog.get(item_id) if item_id is not None else None
    if item is None:
        return None
    return item.id if await _held_order(s, item, user_id) == str(order_id) else None


async def get_order(request: Request) -> Response:
    s, user_id = buyer(request)
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


async def get_item_order(request: Request) -> Response:
    """The buyer's order for an item, found by the item: for a holder who lost the answer that
    named it (a connection dropped after the unit was taken). Once the item is flagged sold out
    a purchase answers 410 to everyone without reading a token, so the purchase route cannot
    tell the holder; this route can, at the cost of one Redis read for a signed-in buyer."""
    s, user_id = buyer(request)
    item_id = path_param(request, "item_id", database_id, "ITEM_NOT_FOUND")
    item = await s.catalog.get(item_id)
    if item is None:
        raise NotFound("ITEM_NOT_FOUND")
    held = await _held_order(s, item, user_id)
    order_id = parse_order_id(held) if held is not None else None
    if order_id is None:
        raise NotFound("ORDER_NOT_FOUND")
    row = await order_status(s.pool, order_id)
    if row is not None and row["user_id"] != user_id:
        raise NotFound("ORDER_NOT_FOUND")  # never another buyer's order, whatever Redis says
    status = row["status"] if row is not None else "PENDING"  # PENDING: not stored yet
    return json_response({"orderId": str(order_id), "itemId": item.id, "status": status})


async def _not_stored(s: Services, order_id: uuid.UUID, user_id: int) -> Conflict | NotFound:
    if await _still_in_flight(s, order_id, user_id) is not None:
        return Conflict("ORDER_PROCESSING", retry_after=1)
    return NotFound("ORDER_NOT_FOUND")


async def pay_order(request: Request) -> Response:
    s, user_id = buyer(request)
    order_id = _order_id(request)
    result = await pay(s.pool, order_id, user_id)
    if result is PayResult.PAID:
        return json_response({"orderId": str(order_id), "status": "PAID"})
    if result in _PAY_REFUSALS:
        raise Conflict(_PAY_REFUSALS[result])
    raise await _not_stored(s, order_id, user_id)


async def cancel_order(request: Request) -> Response:
    s, user_id = buyer(request)
    order_id = _order_id(request)
    ended = await cancel(s.pool, order_id, user_id)
    if ended is not None:
        for item_id in await release_units(s.router, [ended]):
            await announce_restock(s.flags, s.router, item_id)
        return json_response({"orderId": str(order_id), "status": "CANCELLED"})
    row = await order_status(s.pool, order_id)
    if row is None or row["user_id"] != user_id:
        raise await _not_stored(s, order_id, user_id)
    if row["status"] == "CANCELLED":
        return json_response({"orderId": str(order_id), "status": "CANCELLED"})
    raise Conflict(f"ORDER_{row['status']}")
