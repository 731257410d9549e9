"""``POST /api/flash-sales/sales/{saleId}/queue``, a Starlette route: join a sale's waiting
room (proof of work first, if the sale asks it) and get a signed ticket."""

from __future__ import annotations

import time

from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response

from gateway import bodies
from gateway.errors import NotAdmitted, SaleNotOpen, Unavailable
from gateway.ratelimit import RouteLimits
from gateway.requests import database_id, path_param, services
from gateway.responses import json_response
from gateway.waiting_room import proof, queue
from gateway.waiting_room.frontier import WaitingRooms
from gateway.waiting_room.lookup import moment, open_room
from gateway.waiting_room.tickets import Signer, Ticket
from kernel.errors import ShardUnavailable


async def join(request: Request) -> Response:
    state = request.app.state
    limits: RouteLimits = state.limits
    address = state.client_address.of(request.scope)
    limits.per_address.check(address)
    # The token first: an unauthenticated request must not make this gateway re-read its rooms
    # (an unknown sale waits for that read).
    s = services(request)
    buyer = s.verifier.user_id(request.headers.get("authorization"))
    limits.queue.check(buyer)
    limits.joins.check(address)  # after the token: a forged one must not spend the address's
    rooms: WaitingRooms = state.rooms
    room = await open_room(rooms, path_param(request, "sale_id", database_id, "SALE_NOT_FOUND"))
    now = time.time()
    if now >= room.ends_at:
        raise SaleNotOpen()
    if not proof.valid(room.sale, buyer, request.headers.get(proof.HEADER), room.pow_difficulty):
        raise NotAdmitted("PROOF_OF_WORK_REQUIRED", difficulty=room.pow_difficulty)
    try:
        if now >= room.starts_at:
            await rooms.ensure_placed(room, now)
        joined = await queue.join(
            s.router.client, room.sale, buyer, int(now * 1000), address, room.ends_at
        )
    except ShardUnavailable:
        raise Unavailable() from None
    rooms.joined(room.sale)
    signer: Signer = state.signer
    ticket = signer.ticket(Ticket(buyer, room.sale, *joined))
    return json_response(bodies.QueueTicket(ticket, moment(room.starts_at), joined[0] or UNSET))
