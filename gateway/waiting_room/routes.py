"""``POST`` (join) and ``GET`` (poll) ``/api/flash-sales/sales/{saleId}/queue``.

A poll reads only local state — the signed ticket, the room, the sold-out flags and the pushed
frontier — except once per early arrival: its first poll after the start reads the place it
was given (one HGET) and hands back a ticket that carries it. Both routes count against the
client address's bucket (before anything else) and the buyer's queue bucket.
"""

from __future__ import annotations

import datetime as dt
import math
import time

from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response

from gateway import bodies
from gateway.errors import NotAdmitted, NotFound, SaleNotOpen, SoldOut, Unauthorized, Unavailable
from gateway.requests import database_id, path_param, services
from gateway.responses import json_response
from gateway.waiting_room import proof, queue
from gateway.waiting_room.frontier import Room, WaitingRooms
from gateway.waiting_room.tickets import Signer, Ticket
from kernel.settings import Settings

TICKET_HEADER = "x-queue-ticket"
_REFRESH_EVERY_S = 1.0  # an unknown sale re-reads the rooms at most this often


def _rooms(request: Request) -> WaitingRooms:
    found: WaitingRooms = request.app.state.rooms
    return found


def _signer(request: Request) -> Signer:
    found: Signer = request.app.state.signer
    return found


def _moment(epoch_s: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch_s, dt.UTC)


async def _room(request: Request) -> Room:
    limits = request.app.state.limits
    limits.per_address.check(request.app.state.client_address.of(request.scope))
    sale = path_param(request, "sale_id", database_id, "SALE_NOT_FOUND")
    rooms = _rooms(request)
    room = rooms.rooms.get(sale)
    if room is None:
        await rooms.refresh_soon(_REFRESH_EVERY_S)
        room = rooms.rooms.get(sale)
    if room is None:
        raise NotFound("SALE_NOT_FOUND")  # no such sale, not armed, or without a room
    if rooms.sold_out(room):
        raise SoldOut()
    return room


async def join(request: Request) -> Response:
    room = await _room(request)
    s = services(request)
    buyer = s.verifier.user_id(request.headers.get("authorization"))
    request.app.state.limits.queue.check(buyer)
    now = time.time()
    if now >= room.ends_at:
        raise SaleNotOpen()
    if not proof.valid(room.sale, buyer, request.headers.get(proof.HEADER), room.pow_difficulty):
        raise NotAdmitted("PROOF_OF_WORK_REQUIRED", difficulty=room.pow_difficulty)
    try:
        if now >= room.starts_at:
            await _rooms(request).ensure_placed(room, now)
        address = request.app.state.client_address.of(request.scope)
        joined = await queue.join(s.router.client, room.sale, buyer, int(now * 1000), address)
    except queue.FAILURES:
        raise Unavailable() from None
    ticket = _signer(request).ticket(Ticket(buyer, room.sale, *joined))
    return json_response(bodies.QueueTicket(ticket, _moment(room.starts_at), joined[0] or UNSET))


async def poll(request: Request) -> Response:
    room = await _room(request)
    signer = _signer(request)
    ticket = signer.read_ticket(request.headers.get(TICKET_HEADER))
    if ticket is None or ticket.sale != room.sale:
        raise Unauthorized("INVALID_TICKET")
    request.app.state.limits.queue.check(ticket.buyer)
    cfg = services(request).cfg
    now = time.time()
    if now < room.starts_at:
        return _waiting(ticket, signer, None, math.ceil(room.starts_at - now), cfg)
    if ticket.place == 0:
        try:
            found = await queue.place_of(services(request).router.client, room.sale, ticket.buyer)
        except queue.FAILURES:
            raise Unavailable() from None
        if found is None:
            raise Unauthorized("INVALID_TICKET")  # signed, but its queue is gone
        ticket = Ticket(ticket.buyer, ticket.sale, *found)
        if ticket.place == 0:
            return _waiting(ticket, signer, None, 1, cfg)  # being placed right now
    rooms = _rooms(request)
    if ticket.place <= rooms.spent.get(room.sale, 0):
        raise SoldOut()  # admitted before a sell-out, or let a re-offer run out: this one is over
    frontier = rooms.frontier.get(room.sale, 0)
    if ticket.place <= frontier:
        expires = int(now) + cfg.waiting_room_admission_s
        admission = signer.admission(ticket.buyer, room.sale, ticket.place, expires)
        return json_response(
            bodies.QueueStatus(
                "ADMITTED",
                signer.ticket(ticket),
                ticket.place,
                admission=admission,
                admission_expires_at=_moment(expires),
            )
        )
    ahead = ticket.place - frontier - 1
    return _waiting(ticket, signer, ahead, math.ceil(ahead / room.rate), cfg)


def _waiting(
    ticket: Ticket, signer: Signer, ahead: int | None, wait_s: int, cfg: Settings
) -> Response:
    """Still waiting; the client must poll again after Retry-After (capped, so an estimate
    that shrinks as others drop out is noticed)."""
    retry = max(1, min(wait_s, cfg.waiting_room_max_retry_after_s))
    body = bodies.QueueStatus(
        "WAITING",
        signer.ticket(ticket),
        ticket.place or UNSET,
        UNSET if ahead is None else ahead,
        wait_s,
        retry,
    )
    response = json_response(body)
    response.headers["retry-after"] = str(retry)
    return response
