"""Creating a sale: the admin request's wire type and the insert, shared by HTTP and the CLI.

Both decode into ``NewSale`` (the API from its body, the CLI from its options or a file), so
the two refuse the same input with the same rule; building one with ``NewSale(...)`` skips the
constraints, so callers convert instead (``decode_new_sale`` or ``msgspec.convert``).
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import asyncpg
import msgspec

from domain.rules import Money, Name, check_window


class NewItem(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    product_id: Name
    quantity: Annotated[int, msgspec.Meta(ge=0, le=100_000_000)]
    price: Money
    shards: Annotated[int, msgspec.Meta(ge=1, le=256)] = 4


AdmissionRate = Annotated[int, msgspec.Meta(ge=1, le=100_000)]  # the column's CHECK too


class WaitingRoom(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """A sale's waiting room (docs/waiting-room.md): buyers queue and are admitted at a rate."""

    # None: the gateway's configured default (waiting_room_rate_per_s).
    admission_rate_per_second: AdmissionRate | None = None
    pow_difficulty: Annotated[int, msgspec.Meta(ge=0, le=32)] = 0  # 0: no proof of work


class NewSale(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    name: Name
    starts_at: dt.datetime
    ends_at: dt.datetime
    items: Annotated[list[NewItem], msgspec.Meta(min_length=1, max_length=1000)]
    payment_window_seconds: Annotated[int, msgspec.Meta(ge=1, le=86_400)] = 600
    waiting_room: WaitingRoom | None = None  # off: buyers race as without one

    def __post_init__(self) -> None:
        check_window(self.starts_at, self.ends_at)


decode_new_sale = msgspec.json.Decoder(NewSale).decode


class RoomControls(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """A change to a running waiting room (``POST /admin/sales/{id}/room``, ``flashsale room``):
    pause or resume it, set its admission rate; a field left out keeps its value."""

    paused: bool | msgspec.UnsetType = msgspec.UNSET
    rate_per_second: AdmissionRate | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        if self.paused is msgspec.UNSET and self.rate_per_second is msgspec.UNSET:
            raise ValueError("nothing to change: give paused, ratePerSecond or both")


decode_room_controls = msgspec.json.Decoder(RoomControls).decode


async def create_sale(pool: asyncpg.Pool, sale: NewSale) -> tuple[int, list[int]]:
    room = sale.waiting_room
    async with pool.acquire() as conn, conn.transaction():
        sale_id: int = await conn.fetchval(
            "insert into flash_sale (name, starts_at, ends_at, payment_window_seconds, "
            "waiting_room, admission_rate_per_second, pow_difficulty) "
            "values ($1, $2, $3, $4, $5, $6, $7) returning id",
            sale.name,
            sale.starts_at,
            sale.ends_at,
            sale.payment_window_seconds,
            room is not None,
            None if room is None else room.admission_rate_per_second,
            0 if room is None else room.pow_difficulty,
        )
        item_ids = [
            await conn.fetchval(
                "insert into flash_sale_item (sale_id, product_id, price, quantity, shards) "
                "values ($1, $2, $3, $4, $5) returning id",
                sale_id,
                item.product_id,
                item.price,
                item.quantity,
                item.shards,
            )
            for item in sale.items
        ]
    return sale_id, item_ids
