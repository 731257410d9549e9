"""A waiting room's controls during its sale: pause it, resume it, set its admission rate
(``POST /admin/sales/{id}/room``, gateway/room_admin.py, and ``flashsale room``).

PostgreSQL's sale row is the record (``room_paused``, ``admission_rate_per_second``,
``room_version``); the room's meta hash in Redis is what the frontier's script obeys
(queue.py). A change is written to the record first, its version counted up, then applied to
Redis: once that returns, the next tick of every gateway obeys it, whichever gateway runs it.
If the process dies between the two, or Redis fails, the record is ahead, and that is repaired
without anyone: each gateway's tick carries the record's controls as its last refresh read
them, and Redis applies a newer version, within ``item_cache_seconds`` and a tick. The other
order could leave Redis ahead of a record that never learns it.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET
from redis.asyncio.cluster import RedisCluster

from domain.sales import RoomControls
from gateway.waiting_room import queue

_RECORD = """
select waiting_room, room_paused, admission_rate_per_second as rate, room_version,
       extract(epoch from ends_at)::float8 as ends_at
from flash_sale where id = $1
"""
_CHANGE = """
update flash_sale set room_paused = coalesce($2, room_paused),
       admission_rate_per_second = coalesce($3, admission_rate_per_second),
       room_version = room_version + 1
where id = $1 and waiting_room
returning waiting_room, room_paused, admission_rate_per_second as rate, room_version,
          extract(epoch from ends_at)::float8 as ends_at
"""
_READ_ONLY = queue.Controls(-1, False, 1)  # a version no room is behind: applies nothing


class NoSuchSale(Exception):
    """No sale has this id."""


class NoRoom(Exception):
    """The sale was created without a waiting room."""


class RoomState(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """A waiting room's controls (as recorded) and how far it has come (as Redis has it)."""

    sale_id: int
    paused: bool
    rate_per_second: int  # the sale's own, or the gateways' default when it named none
    version: int  # changes recorded so far
    applied: bool  # Redis obeys this version (false: the gateways' ticks apply it soon)
    admitted: int  # places 1..admitted have been admitted (the frontier)
    joined: int  # places given (0 until the start places the early arrivals)
    spent: int  # places up to here can no longer buy (admitted before a sell-out)


def _record(row: Any, default_rate: int) -> tuple[queue.Controls, float]:
    controls = queue.Controls(row["room_version"], row["room_paused"], row["rate"] or default_rate)
    return controls, row["ends_at"]


def _state(sale: int, record: queue.Controls, redis: queue.Applied) -> RoomState:
    return RoomState(
        sale,
        record.paused,
        record.rate,
        record.version,
        redis.controls.version >= record.version,
        redis.frontier,
        redis.joined,
        redis.spent,
    )


async def _row(pool: Any, sale: int) -> Any:
    row = await pool.fetchrow(_RECORD, sale)
    if row is None:
        raise NoSuchSale(sale)
    if not row["waiting_room"]:
        raise NoRoom(sale)
    return row


async def read(pool: Any, client: RedisCluster, sale: int, default_rate: int) -> RoomState:
    """The room's state; changes nothing. Raises NoSuchSale, NoRoom, ShardUnavailable."""
    record, ends_at = _record(await _row(pool, sale), default_rate)
    return _state(sale, record, await queue.apply_controls(client, sale, _READ_ONLY, ends_at))


async def change(
    pool: Any, client: RedisCluster, sale: int, wanted: RoomControls, default_rate: int
) -> RoomState:
    """Record the change, then apply it to Redis (see the module's docstring for why in this
    order). Raises NoSuchSale, NoRoom; ShardUnavailable once recorded (the ticks apply it)."""
    paused = None if wanted.paused is UNSET else wanted.paused
    rate = None if wanted.rate_per_second is UNSET else wanted.rate_per_second
    row = await pool.fetchrow(_CHANGE, sale, paused, rate)
    if row is None:
        await _row(pool, sale)  # raises the refusal: no such sale, or no room
        raise NoRoom(sale)  # not reached: waiting_room is set once, by the insert
    record, ends_at = _record(row, default_rate)
    return _state(sale, record, await queue.apply_controls(client, sale, record, ends_at))


def planned(state: RoomState, wanted: RoomControls) -> RoomState:
    """What ``wanted`` would make of ``state``, for a dry run (nothing is written)."""
    rate = wanted.rate_per_second
    return msgspec.structs.replace(
        state,
        paused=state.paused if wanted.paused is UNSET else wanted.paused,
        rate_per_second=state.rate_per_second if rate is UNSET else rate,
        version=state.version + 1,
        applied=False,
    )
