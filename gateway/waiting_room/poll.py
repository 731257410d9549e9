"""``GET /api/flash-sales/sales/{saleId}/queue`` (the buyer's token and ``X-Queue-Ticket``),
answered by the front as the purchase is: no framework, since everyone waiting polls every
Retry-After. Only the ticket's own buyer may poll it: anyone else is refused before the room is
looked at, so nobody learns another buyer's place or has an admission minted in its name.

A poll reads only local state — the buyer's token (verified once, then remembered until its
expiry), the signed ticket, the room, the sold-out flags, the pushed frontier and the room's
controls as this gateway's last tick found them — except once per early arrival: its first poll
after the start reads the place it was given (one HGET) and hands back a ticket that carries it.
"""

from __future__ import annotations

import math
from typing import Any

from msgspec import UNSET

from gateway import bodies
from gateway.client_address import ClientAddress
from gateway.errors import ApiError, NotAdmitted, SoldOut, Unauthorized, Unavailable
from gateway.purchase import Answer, header
from gateway.ratelimit import RouteLimits
from gateway.requests import database_id
from gateway.responses import encode, raw_headers, render
from gateway.services import Services
from gateway.waiting_room import queue
from gateway.waiting_room.frontier import WaitingRooms
from gateway.waiting_room.lookup import moment, open_room
from gateway.waiting_room.tickets import Ticket
from kernel.errors import ShardUnavailable

TICKET_HEADER = b"x-queue-ticket"


class PollHandler:
    """The poll as a raw ASGI handler: the front (gateway/front.py) calls it with the sale id's
    text from the path."""

    def __init__(
        self, services: Services, address: ClientAddress, limits: RouteLimits, rooms: WaitingRooms
    ) -> None:
        self.s = services
        self._address = address
        self._limits = limits
        self._rooms = rooms
        self._signer = rooms.signer
        self._admission_s = services.cfg.waiting_room_admission_s
        self._max_retry_s = services.cfg.waiting_room_max_retry_after_s

    async def __call__(self, scope: dict[str, Any], send: Any, sale_text: str) -> None:
        try:
            status, headers, body = await self._answer(scope, sale_text)
        except ApiError as error:
            status, headers, body = render(error)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _answer(self, scope: dict[str, Any], sale_text: str) -> Answer:
        self._limits.per_address.check(self._address.of(scope))
        # The buyer's token and the ticket's signature first, both checked locally (the
        # verifier remembers a token it verified): only a buyer polling its own ticket can make
        # this gateway re-read its rooms (an unknown sale waits for that read).
        buyer = self.s.verifier.user_id(header(scope, b"authorization"))
        self._limits.queue.check(buyer)
        text = header(scope, TICKET_HEADER)
        ticket = self._signer.read_ticket(text)
        if text is None or ticket is None:
            raise Unauthorized("INVALID_TICKET")
        if ticket.buyer != buyer:
            raise NotAdmitted("TICKET_NOT_YOURS")  # its admission would name another buyer
        room = await open_room(self._rooms, database_id(sale_text))
        if ticket.sale != room.sale:
            raise Unauthorized("INVALID_TICKET")
        now = self._rooms.clock.now()
        if now < room.starts_at:
            return self._waiting(ticket, text, None, math.ceil(room.starts_at - now))
        if ticket.place == 0:
            try:
                found = await queue.place_of(self.s.router.client, room.sale, ticket.buyer)
            except ShardUnavailable:
                raise Unavailable() from None
            if found is None:
                raise Unauthorized("INVALID_TICKET")  # signed, but its queue is gone
            ticket = Ticket(ticket.buyer, ticket.sale, *found)
            text = self._signer.ticket(ticket)  # now with its place
            if ticket.place == 0:
                return self._waiting(ticket, text, None, 1)  # being placed right now
        if ticket.place <= self._rooms.spent.get(room.sale, 0):
            raise SoldOut()  # admitted before a sell-out, or let a re-offer run out: over
        frontier = self._rooms.frontier.get(room.sale, 0)
        if ticket.place <= frontier:
            expires = int(now) + self._admission_s
            admission = self._signer.admission(ticket.buyer, room.sale, ticket.place, expires)
            status = bodies.QueueStatus(
                "ADMITTED",
                text,
                ticket.place,
                admission=admission,
                admission_expires_at=moment(expires),
            )
            body = encode(status)
            return 200, raw_headers(body), body
        ahead = ticket.place - frontier - 1
        controls = self._rooms.controls(room)
        if controls.paused:  # no estimate: nobody moves until it resumes
            return self._waiting(ticket, text, ahead, None)
        return self._waiting(ticket, text, ahead, math.ceil(ahead / controls.rate))

    def _waiting(self, ticket: Ticket, text: str, ahead: int | None, wait_s: int | None) -> Answer:
        """Still waiting; the client must poll again after Retry-After (capped, so an estimate
        that shrinks as others drop out, or a paused room's resuming, is noticed). ``text``: the
        ticket as signed; ``wait_s`` None: no estimate (the room is paused)."""
        retry = max(1, min(self._max_retry_s if wait_s is None else wait_s, self._max_retry_s))
        status = bodies.QueueStatus(
            "WAITING",
            text,
            ticket.place or UNSET,
            UNSET if ahead is None else ahead,
            UNSET if wait_s is None else wait_s,
            retry,
        )
        body = encode(status)
        return 200, raw_headers(body, retry), body
