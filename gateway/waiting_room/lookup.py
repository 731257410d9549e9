"""What both queue routes (join.py, poll.py) share: the open room a request names, and the
moments they answer with.

Both count against the client address's bucket before anything else, then against the buyer's
queue bucket, then look the room up here.
"""

from __future__ import annotations

import datetime as dt

import asyncpg

from gateway.errors import NotFound, SoldOut, Unavailable
from gateway.waiting_room.frontier import Room, WaitingRooms

_REFRESH_EVERY_S = 1.0  # an unknown sale re-reads the rooms at most this often


def moment(epoch_s: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch_s, dt.UTC)


async def open_room(rooms: WaitingRooms, sale: int | None) -> Room:
    """The sale's room, still selling: 404 SALE_NOT_FOUND, 410 SOLD_OUT, or 503 when the rooms
    could not be re-read."""
    room = None if sale is None else rooms.rooms.get(sale)
    if room is None and sale is not None:
        try:
            await rooms.refresh_soon(_REFRESH_EVERY_S)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            raise Unavailable() from None  # the raw poll front has no handler for these
        room = rooms.rooms.get(sale)
    if room is None:
        raise NotFound("SALE_NOT_FOUND")  # no such sale, not armed, or without a room
    if rooms.sold_out(room):
        raise SoldOut()
    return room
