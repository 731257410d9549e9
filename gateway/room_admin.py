"""The admin API's waiting-room controls: ``GET /admin/sales/{id}/room`` reads a room's state,
``POST`` pauses it, resumes it or sets its admission rate (gateway/waiting_room/controls.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from starlette.requests import Request
from starlette.responses import Response

from domain.sales import decode_room_controls
from gateway.errors import Conflict, NotFound, Unavailable
from gateway.requests import admin, database_id, decode_body, path_param
from gateway.responses import json_response
from gateway.waiting_room import controls
from kernel.errors import ShardUnavailable

MAX_BODY = 1024


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    try:
        yield
    except controls.NoSuchSale:
        raise NotFound("SALE_NOT_FOUND") from None
    except controls.NoRoom:
        raise Conflict("NO_WAITING_ROOM") from None
    except ShardUnavailable:
        raise Unavailable() from None  # a change is recorded by then: the ticks apply it


async def room(request: Request) -> Response:
    """One route, two methods: GET reads, POST changes."""
    return await (post_room(request) if request.method == "POST" else get_room(request))


async def get_room(request: Request) -> Response:
    s = admin(request)
    sale = path_param(request, "sale_id", database_id, "SALE_NOT_FOUND")
    with _refusals():
        state = await controls.read(s.pool, s.router.client, sale, s.cfg.waiting_room_rate_per_s)
    return json_response(state)


async def post_room(request: Request) -> Response:
    s = admin(request)
    sale = path_param(request, "sale_id", database_id, "SALE_NOT_FOUND")
    wanted = await decode_body(request, decode_room_controls, MAX_BODY)
    with _refusals():
        state = await controls.change(
            s.pool, s.router.client, sale, wanted, s.cfg.waiting_room_rate_per_s
        )
    return json_response(state)
