"""``flashsale room``: a waiting room's state as text or JSON; --pause/--resume/--rate record the
change in PostgreSQL and apply it to Redis (the API's own code); --dry-run prints the state the
change would give and writes neither; the API's rules refuse bad options in one line."""

from __future__ import annotations

import json

import asyncpg
import pytest
from redis.asyncio.cluster import RedisCluster

from kernel.settings import Settings
from tests.flashsale.test_cli import flashsale, ok, refused, sale_body

pytestmark = pytest.mark.integration


def _room_sale(rate: int | None) -> int:
    body = sale_body(items=1)
    body["waitingRoom"] = {} if rate is None else {"admissionRatePerSecond": rate}
    sale_id: int = ok(flashsale("sale", "create", "--from", "-", stdin=json.dumps(body))).json()[
        "saleId"
    ]
    return sale_id


async def _record(db: asyncpg.Pool, sale: int) -> tuple[bool, int | None, int]:
    row = await db.fetchrow(
        "select room_paused, admission_rate_per_second, room_version from flash_sale where id = $1",
        sale,
    )
    assert row is not None
    return row["room_paused"], row["admission_rate_per_second"], row["room_version"]


async def test_room_shows_changes_and_dry_runs(
    live_stack: Settings, db: asyncpg.Pool, redis: RedisCluster
) -> None:
    sale = _room_sale(40)
    meta = f"{{room:{sale}}}:meta"
    shown = ok(flashsale("room", str(sale), "--json")).json()
    assert shown == {
        "saleId": sale,
        "paused": False,
        "ratePerSecond": 40,
        "version": 0,
        "applied": False,  # nothing ticks a sale not yet armed: Redis holds no version
        "admitted": 0,
        "joined": 0,
        "spent": 0,
    }
    assert "admitting at 40/s" in ok(flashsale("room", str(sale))).out

    dry = ok(flashsale("room", str(sale), "--pause", "--rate", "80", "--dry-run", "--json"))
    assert (dry.json()["paused"], dry.json()["ratePerSecond"], dry.json()["version"]) == (
        True,
        80,
        1,
    )
    assert f"dry run: sale {sale}'s waiting room not changed" in dry.err
    assert await _record(db, sale) == (False, 40, 0)
    assert await redis.exists(meta) == 0

    done = ok(flashsale("room", str(sale), "--pause", "--rate", "80", "--json")).json()
    assert (done["paused"], done["ratePerSecond"], done["version"], done["applied"]) == (
        True,
        80,
        1,
        True,
    )
    assert await _record(db, sale) == (True, 80, 1)
    assert await redis.hmget(meta, "version", "paused", "rate") == [b"1", b"1", b"80"]
    assert await redis.ttl(meta) > 0  # the room's keys all expire a week after the sale

    resumed = ok(flashsale("room", str(sale), "--resume"))
    assert "admitting at 80/s, change 2" in resumed.out
    assert await _record(db, sale) == (False, 80, 2)
    assert await redis.hmget(meta, "version", "paused") == [b"2", b"0"]


async def test_room_refusals(live_stack: Settings, db: asyncpg.Pool) -> None:
    sale = _room_sale(None)  # the gateways' default rate
    assert ok(flashsale("room", str(sale), "--json")).json()["ratePerSecond"] == (
        live_stack.waiting_room_rate_per_s
    )
    for args, line in [
        ([str(sale), "--rate", "0"], "--rate: must be at least 1"),
        ([str(sale), "--rate", "100001"], "--rate: must be at most 100000"),
        ([str(sale), "--rate", "x"], "--rate: must be an integer, got 'x'"),
        ([str(sale), "--pause", "--resume"], "--resume: not allowed with argument --pause"),
        ([str(sale), "--dry-run"], "--dry-run: only with --pause, --resume or --rate"),
        (["0"], "SALE_ID: must be at least 1"),
    ]:
        assert refused(flashsale("room", *args), 2).startswith(f"flashsale: {line}")
    assert await _record(db, sale) == (False, None, 0)

    plain = ok(flashsale("sale", "create")).json()["saleId"]
    assert "has no waiting room" in refused(flashsale("room", str(plain), "--pause"), 1)
    assert "does not exist" in refused(flashsale("room", "999999999999"), 1)
