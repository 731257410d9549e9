"""A waiting room's controls during its sale (``GET``/``POST /admin/sales/{id}/room``), on the
real stack with two real gateways ticking the same room: a change sent to one binds the
other's ticks and polls; a pause stops the frontier, a resume continues it at the rate without
admitting anyone for the paused time, a new rate is the rate measured from then on; a change
recorded in PostgreSQL but never applied to Redis is applied by the ticks; bad input is a 4xx."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import asyncpg
import httpx
import pytest
from redis.asyncio.cluster import RedisCluster

from flashsale.room_buyers import RoomClient
from flashsale.stack.processes import settings_env
from kernel.settings import Settings
from rig.admin import create_sale
from rig.ports import free_port
from rig.sale import LIFTED_IP_LIMITS
from rig.waiting import until
from tests.support.gateway import ADMIN, new_sale, running_gateway

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_users = itertools.count(uuid.uuid4().int % 10**12 * 1000 + 7 * 10**14)
_TICK_S = 0.05
_MAX_RETRY_S = 30  # a paused room's Retry-After (FLASHSALE_WAITING_ROOM_MAX_RETRY_AFTER_S)
_ENV = settings_env(
    **LIFTED_IP_LIMITS,
    waiting_room_tick_ms=int(_TICK_S * 1000),
    waiting_room_max_retry_after_s=_MAX_RETRY_S,
)
# The frontier moves at each tick; a sample read between two ticks lags the admissions Redis's
# clock owes by up to a tick, more when a loaded machine runs a tick late. Over a window the
# measured count may be off by what the two ends' lags differ: at most this many ticks' worth.
_LAG_TICKS = 4
_WINDOW_S = 3.0
_FLAT_TICKS = 20  # a paused room is watched this many ticks for an admission


@pytest.fixture(scope="module")
def gateways(live_stack: Settings) -> Iterator[tuple[str, str]]:
    logs = live_stack.log_dir
    with (
        running_gateway(live_stack, free_port(), log=logs / "test-room-a.log", **_ENV) as a,
        running_gateway(live_stack, free_port(), log=logs / "test-room-b.log", **_ENV) as b,
    ):
        yield a, b


def _room(base: str, sale: int | str, body: dict[str, Any] | None = None) -> httpx.Response:
    url = f"{base}/admin/sales/{sale}/room"
    if body is None:
        return httpx.get(url, headers=ADMIN, timeout=10)
    return httpx.post(url, json=body, headers=ADMIN, timeout=10)


def _controlled(base: str, sale: int, body: dict[str, Any]) -> dict[str, Any]:
    answer = _room(base, sale, body)
    assert answer.status_code == 200, answer.text
    state: dict[str, Any] = answer.json()
    assert state["applied"] is True, state
    return state


async def _frontier(redis: RedisCluster, sale: int) -> int:
    return int(await redis.hget(f"{{room:{sale}}}:meta", "frontier") or 0)


async def _samples(redis: RedisCluster, sale: int, seconds: float) -> list[tuple[float, int]]:
    """(monotonic time, frontier) once a tick for ``seconds``."""
    found, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        found.append((time.monotonic(), await _frontier(redis, sale)))
        await asyncio.sleep(_TICK_S)
    return found


async def _rate_follows(
    redis: RedisCluster, sale: int, rate: int, since: float, start: int, before: int = 0
) -> None:
    """From a change sent at ``since`` (monotonic) with the frontier read then at ``start``:
    never more admitted than the rate owes since then (no jump: a room stopped for a second
    would owe ``rate`` places more), and over a window the count is the rate's within the tick
    lag. ``before``: the rate until then, whose places owed but not yet ticked may follow."""
    samples = await _samples(redis, sale, _WINDOW_S)
    unticked = before * _LAG_TICKS * _TICK_S + 1
    for at, frontier in samples:
        assert frontier <= start + rate * (at - since) + unticked, (at - since, frontier - start)
    (t1, f1), (t2, f2) = samples[2], samples[-1]  # from 2 ticks in: the change has bound
    owed = rate * (t2 - t1)
    assert abs((f2 - f1) - owed) <= rate * _LAG_TICKS * _TICK_S + 1, (f2 - f1, owed)


async def _stays_flat(redis: RedisCluster, sale: int) -> int:
    """The frontier over ``_FLAT_TICKS`` ticks, which must not move; → its value."""
    values = {f for _, f in await _samples(redis, sale, _FLAT_TICKS * _TICK_S)}
    assert len(values) == 1, sorted(values)
    return values.pop()


async def _paused_poll(client: RoomClient, buyer: int, ticket: str) -> bool:
    """Whether this ticket's poll answers as a paused room's: WAITING, no estimate, Retry-After
    the cap."""
    status, body, retry = await client.poll(buyer, ticket)
    assert status == 200 and body["state"] == "WAITING", body
    return "estimatedWaitSeconds" not in body and retry == _MAX_RETRY_S


async def test_pause_resume_and_rate_sent_to_one_gateway_bind_the_other(
    gateways: tuple[str, str], live_stack: Settings, redis: RedisCluster
) -> None:
    a, b = gateways
    sale = create_sale(
        a, live_stack, units=5000, shards=2, opens_at=time.time() - 1, waiting_room=True
    )
    state = _controlled(b, sale.sale_id, {"paused": True, "ratePerSecond": 20})
    assert (state["paused"], state["ratePerSecond"], state["admitted"]) == (True, 20, 0)

    buyers = [next(_users) for _ in range(600)]
    async with aiohttp.ClientSession(a) as on_a:
        client = RoomClient(on_a, live_stack, sale.sale_id, sale.item_id)
        joins = await asyncio.gather(*(client.join(buyer) for buyer in buyers))
        assert {status for status, _ in joins} == {200}, joins[:3]
        last, last_ticket = buyers[-1], joins[-1][1]["ticket"]
        # Paused from before the first join: nobody is admitted, through either gateway.
        assert _room(b, sale.sale_id).json()["joined"] == len(buyers)  # placed: could move
        assert await _stays_flat(redis, sale.sale_id) == 0
        assert await _paused_poll(client, last, last_ticket)

        # Resumed through A: admissions start at the rate, nothing owed for the paused time.
        since = time.monotonic()
        _controlled(a, sale.sale_id, {"paused": False})
        await _rate_follows(redis, sale.sale_id, 20, since, 0)
        await until(lambda: _estimated(client, last, last_ticket), 2, "A's polls estimating again")

        # A new rate through B: measured from then on, without a jump.
        since = time.monotonic()
        start = await _frontier(redis, sale.sale_id)
        assert _controlled(b, sale.sale_id, {"ratePerSecond": 60})["ratePerSecond"] == 60
        await _rate_follows(redis, sale.sale_id, 60, since, start, before=20)

        # Paused through B while admitting: flat, and A's polls say so within a tick or two.
        state = _controlled(b, sale.sale_id, {"paused": True})
        held = await _stays_flat(redis, sale.sale_id)
        assert 0 < held == state["admitted"] < len(buyers)  # not one after the answer
        paused = "A's polls answering paused"
        await until(lambda: _paused_poll(client, last, last_ticket), 2, paused)
        assert _room(a, sale.sale_id).json()["admitted"] == held

        # Resumed through A after the pause: from where it stopped, at the rate set before.
        since = time.monotonic()
        assert _controlled(a, sale.sale_id, {"paused": False})["ratePerSecond"] == 60
        await _rate_follows(redis, sale.sale_id, 60, since, held)


async def _estimated(client: RoomClient, buyer: int, ticket: str) -> bool:
    status, body, retry = await client.poll(buyer, ticket)
    assert status == 200 and body["state"] == "WAITING", body
    return "estimatedWaitSeconds" in body and retry < _MAX_RETRY_S


async def test_a_change_recorded_but_not_applied_is_applied_by_the_ticks(
    gateways: tuple[str, str], live_stack: Settings, redis: RedisCluster, db: asyncpg.Pool
) -> None:
    """The process that wrote the record died before Redis (or Redis refused): the record is
    ahead, and every gateway's tick carries it, so Redis catches up without anyone."""
    a, _ = gateways
    sale = create_sale(
        a, live_stack, units=10, shards=1, opens_at=time.time() - 1, waiting_room=True
    )
    _controlled(a, sale.sale_id, {"ratePerSecond": 7})
    version = await db.fetchval(
        "update flash_sale set room_paused = true, admission_rate_per_second = 9, "
        "room_version = room_version + 1 where id = $1 returning room_version",
        sale.sale_id,
    )
    meta = f"{{room:{sale.sale_id}}}:meta"

    async def applied() -> bool:
        held = await redis.hmget(meta, "version", "paused", "rate")
        return held == [str(version).encode(), b"1", b"9"]

    await until(applied, live_stack.item_cache_seconds + 5, "the record applied to Redis")
    state = _room(a, sale.sale_id).json()
    assert (state["paused"], state["ratePerSecond"], state["version"]) == (True, 9, version)
    assert state["applied"] is True


BAD_BODIES = [
    b"{}",
    b'{"ratePerSecond": 0}',
    b'{"ratePerSecond": 100001}',
    b'{"ratePerSecond": 1.5}',
    b'{"ratePerSecond": null}',
    b'{"paused": "yes"}',
    b'{"paused": null}',
    b'{"paused": true, "rate": 5}',
    b"[]",
    b"not json",
]


async def test_bad_bodies_and_unknown_or_roomless_sales_are_refused(
    gateways: tuple[str, str], live_stack: Settings
) -> None:
    a, _ = gateways
    sale = create_sale(
        a, live_stack, units=10, shards=1, opens_at=time.time() + 3600, waiting_room=True
    )
    before = _room(a, sale.sale_id).json()
    assert (before["paused"], before["version"], before["joined"]) == (False, 0, 0)
    url = f"{a}/admin/sales/{sale.sale_id}/room"
    for body in BAD_BODIES:
        answer = httpx.post(url, content=body, headers=ADMIN, timeout=10)
        assert answer.status_code == 400, (body, answer.text)
        assert answer.json()["error"] == "INVALID_REQUEST", (body, answer.text)
    assert _room(a, sale.sale_id).json() == before  # nothing was recorded
    big = b'{"paused": true' + b" " * 2048 + b"}"
    assert httpx.post(url, content=big, headers=ADMIN).json() == {"error": "BODY_TOO_LARGE"}

    for missing in ("999999999999", "abc", "0x1"):
        for answer in (_room(a, missing), _room(a, missing, {"paused": True})):
            assert (answer.status_code, answer.json()) == (404, {"error": "SALE_NOT_FOUND"})
    plain = new_sale(a, 3, 1)["saleId"]
    for answer in (_room(a, plain), _room(a, plain, {"paused": True})):
        assert (answer.status_code, answer.json()) == (409, {"error": "NO_WAITING_ROOM"})
    assert httpx.post(url, json={"paused": True}).status_code == 401
    assert _room(a, sale.sale_id).json() == before
