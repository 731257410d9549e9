"""The admin API, behind its own bearer token: create a sale, arm it, read live counters."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from domain.arm import arm_sale
from domain.sales import create_sale, decode_new_sale
from gateway.arming import arm_errors
from gateway.errors import NotFound, Unavailable
from gateway.requests import admin, database_id, decode_body, path_param
from gateway.responses import json_response
from gateway.soldout import announce_restock
from shard_router import ShardUnavailable

MAX_BODY = 1 << 20


async def post_sale(request: Request) -> Response:
    s = admin(request)
    sale = await decode_body(request, decode_new_sale, MAX_BODY)
    sale_id, item_ids = await create_sale(s.pool, sale)
    return json_response(
        {
            "saleId": sale_id,
            "items": [
                {
                    "itemId": item_id,
                    "productId": item.product_id,
                    "quantity": item.quantity,
                    "shards": item.shards,
                }
                for item_id, item in zip(item_ids, sale.items, strict=True)
            ],
        },
        status=201,
    )


async def arm(request: Request) -> Response:
    s = admin(request)
    sale_id = path_param(request, "sale_id", database_id, "SALE_NOT_FOUND")
    with arm_errors():
        armed = await arm_sale(s.pool, s.router, sale_id)
    await s.catalog.refresh()
    for item in armed:
        await announce_restock(s.flags, s.router, item.item_id)
    return json_response(
        {
            "saleId": sale_id,
            "items": [
                {"itemId": a.item_id, "shards": a.shards, "units": a.units, "held": a.held}
                for a in armed
            ],
        }
    )


async def get_item(request: Request) -> Response:
    s = admin(request)
    item_id = path_param(request, "item_id", database_id, "ITEM_NOT_FOUND")
    row = await s.pool.fetchrow(
        "select quantity, sold, shards, paused from flash_sale_item where id = $1", item_id
    )
    if row is None:
        raise NotFound("ITEM_NOT_FOUND")
    try:
        states = await s.router.shard_states(item_id, row["shards"])
    except ShardUnavailable:
        raise Unavailable() from None
    return json_response(
        {
            "itemId": item_id,
            "quantity": row["quantity"],
            "sold": row["sold"],
            "paused": row["paused"],
            "unitsLeft": sum(st.stock for st in states),
            "shards": [
                {
                    "shard": st.shard,
                    "node": st.node,
                    "stock": st.stock,
                    "holds": st.holds,
                    "buyers": st.buyers,
                    "outbox": st.outbox,
                }
                for st in states
            ],
        }
    )
