"""Vouchers end to end on the real stack: a gateway subprocess, and (for flash vouchers) a writer
subprocess consuming this module's own vouchers topic with its own group, so nothing here
touches another test's messages."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import functools
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import asyncpg
import pytest
from confluent_kafka import Producer

from domain.voucher_lifecycle import reserve_ordinary
from domain.vouchers import ReservationRequest
from flashsale.stack.processes import settings_env
from jobs.expiry import expire_once
from jobs.voucher_reconcile import reconcile_vouchers
from kernel.events import VoucherReserved, encode
from kernel.settings import Settings
from rig.http import client_session
from rig.sale import running_writer
from rig.waiting import until
from shard_router import VoucherStore, voucher_keys
from tests.support.constants import QUICK_RELAY, SHORT_HOLD_PORT, VOUCHER_PORT
from tests.support.gateway import ADMIN, SERVICE, running_gateway
from tests.support.kafka import scratch_topics
from tests.support.workers import worker_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

KINDS = ["flash", "ordinary"]
Answer = tuple[int, dict[str, Any]]


# Module plumbing: topics, a voucher writer, a gateway.


@pytest.fixture(scope="module")
def vcfg(live_stack: Settings) -> Iterator[Settings]:
    """Settings pointed at this module's own vouchers topic and writer group."""
    tag = uuid.uuid4().hex[:12]
    vouchers, deadletter = f"test.vouchers.{tag}", f"test.deadletter.{tag}"
    with scratch_topics(live_stack, {vouchers: 3, deadletter: 1}):
        yield dataclasses.replace(
            live_stack,
            vouchers_topic=vouchers,
            deadletter_topic=deadletter,
            voucher_writer_group=f"test-voucher-writer-{tag}",
            writer_streams=("vouchers",),
        )


@pytest.fixture(scope="module")
def env(vcfg: Settings) -> dict[str, str]:
    """What points a gateway or a writer process at ``vcfg``'s topics and group."""
    return settings_env(
        vouchers_topic=vcfg.vouchers_topic,
        deadletter_topic=vcfg.deadletter_topic,
        voucher_writer_group=vcfg.voucher_writer_group,
        writer_streams=vcfg.writer_streams,
    )


@pytest.fixture(scope="module")
def voucher_writer(env: dict[str, str]) -> Iterator[None]:
    with running_writer(env):
        yield


def _gateway_env(env: dict[str, str], **changes: object) -> dict[str, str]:
    return {**env, **settings_env(**QUICK_RELAY, **changes)}


@pytest.fixture(scope="module")
def gateway(live_stack: Settings, env: dict[str, str], voucher_writer: None) -> Iterator[str]:
    with running_gateway(live_stack, VOUCHER_PORT, **_gateway_env(env)) as base:
        yield base


@pytest.fixture
async def http(gateway: str) -> AsyncIterator[aiohttp.ClientSession]:
    async with client_session(gateway, limit=200) as s:
        yield s


# A gateway whose orders may carry one use of each of several vouchers.
COMBINING_PORT = worker_port(18303)


@pytest.fixture(scope="module")
def combining_gateway(
    live_stack: Settings, env: dict[str, str], voucher_writer: None
) -> Iterator[str]:
    changes = _gateway_env(env, voucher_order_combines=1)
    with running_gateway(live_stack, COMBINING_PORT, **changes) as base:
        yield base


@pytest.fixture
async def combining(combining_gateway: str) -> AsyncIterator[aiohttp.ClientSession]:
    async with client_session(combining_gateway, limit=200) as s:
        yield s


# Helpers.


def _order_id() -> str:
    return f"ord-{uuid.uuid4().hex}"


async def _call(
    http: aiohttp.ClientSession, method: str, path: str, **kwargs: Any
) -> tuple[int, dict[str, Any], dict[str, str]]:
    kwargs.setdefault("headers", SERVICE)
    async with http.request(method, path, **kwargs) as response:
        return response.status, await response.json(), dict(response.headers)


async def _create(
    http: aiohttp.ClientSession,
    kind: str,
    total: int,
    *,
    per_customer: int = 1,
    min_order: int = 0,
    starts_in_s: int = -60,
    ends_in_s: int = 3600,
) -> str:
    code = f"T{kind[0]}-{uuid.uuid4().hex[:16]}"
    now = dt.datetime.now(dt.UTC)
    body = {
        "code": code,
        "discountAmount": 100_000,
        "minOrderAmount": min_order,
        "totalLimit": total,
        "perCustomerLimit": per_customer,
        "startsAt": (now + dt.timedelta(seconds=starts_in_s)).isoformat(),
        "endsAt": (now + dt.timedelta(seconds=ends_in_s)).isoformat(),
        "isFlash": kind == "flash",
    }
    status, created, _ = await _call(http, "POST", "/admin/vouchers", json=body, headers=ADMIN)
    assert status == 201, created
    if kind == "flash":
        assert created["armed"] is True and created["remaining"] == total, created
    return code


async def _reserve(
    http: aiohttp.ClientSession, code: str, customer: int, order_id: str, amount: int = 500_000
) -> Answer:
    """Reserve as the order service does: a 503 (undecided: a deadline passed on a loaded box)
    is retried with the same orderId, which the contract makes safe."""
    body = {"customerId": customer, "orderId": order_id, "orderAmount": amount}
    for _ in range(20):
        status, answer, _ = await _call(http, "POST", f"/vouchers/{code}/reservations", json=body)
        if status != 503:
            break
        await asyncio.sleep(0.1)
    return status, answer


async def _settled(http: aiohttp.ClientSession, method: str, path: str) -> Answer:
    """Call until the answer is not RESERVATION_PROCESSING (a flash use on its way to the DB)."""
    deadline = time.monotonic() + 30
    while True:
        status, answer, headers = await _call(http, method, path)
        if answer.get("error") != "RESERVATION_PROCESSING":
            return status, answer
        assert status == 409 and headers.get("Retry-After") == "1"
        assert time.monotonic() < deadline, "the writer never stored the reservation"
        await asyncio.sleep(0.05)


async def _used(db: asyncpg.Pool, code: str) -> int:
    used: int = await db.fetchval("select used_count from voucher where code = $1", code)
    return used


async def _rows(db: asyncpg.Pool, code: str) -> dict[str, str]:
    rows = await db.fetch(
        "select order_id, status from voucher_redemption where voucher_code = $1", code
    )
    return {r["order_id"]: r["status"] for r in rows}


async def _stored(db: asyncpg.Pool, code: str, count: int) -> dict[str, str]:
    """The voucher's redemptions once ``count`` are stored (at once for ordinary vouchers)."""

    async def enough() -> bool:
        return len(await _rows(db, code)) >= count

    await until(enough)
    return await _rows(db, code)


# The race for the uses.


@pytest.mark.parametrize("kind", KINDS)
async def test_200_customers_race_for_10_uses(
    kind: str,
    http: aiohttp.ClientSession,
    db: asyncpg.Pool,
    voucher_store: VoucherStore,
    vcfg: Settings,
) -> None:
    code = await _create(http, kind, 10)
    order_ids = {customer: _order_id() for customer in range(1, 201)}
    answers = await asyncio.gather(*(_reserve(http, code, c, o) for c, o in order_ids.items()))

    assert Counter(status for status, _ in answers) == {201: 10, 409: 190}
    assert all(a == {"error": "OUT_OF_STOCK"} for s, a in answers if s == 409)
    winners = {a["orderId"] for s, a in answers if s == 201}
    assert all(a["discountAmount"] == 100_000 for s, a in answers if s == 201)
    assert set(await _stored(db, code, 10)) == winners
    assert set((await _rows(db, code)).values()) == {"RESERVED"}
    assert await _used(db, code) == 10
    status, counters, _ = await _call(http, "GET", f"/admin/vouchers/{code}", headers=ADMIN)
    assert status == 200
    assert (counters["usedCount"], counters["reserved"], counters["totalLimit"]) == (10, 10, 10)
    if kind == "flash":
        assert (counters["redis"]["remaining"], counters["redis"]["holds"]) == (0, 10)

        async def quiet() -> bool:
            return (await voucher_store.state(code)).outbox == 0

        await until(quiet)
    [report] = await reconcile_vouchers(vcfg, db, voucher_store, [code])
    assert report.drift == 0 and report.used_count == 10


@pytest.mark.parametrize("kind", KINDS)
async def test_the_same_order_id_50_times_at_once_takes_one_use(
    kind: str, http: aiohttp.ClientSession, db: asyncpg.Pool, voucher_store: VoucherStore
) -> None:
    code = await _create(http, kind, 5)
    order_id = _order_id()
    answers = await asyncio.gather(*(_reserve(http, code, 42, order_id) for _ in range(50)))

    assert {(s, a["orderId"], a["discountAmount"]) for s, a in answers} == {
        (201, order_id, 100_000)
    }
    assert await _stored(db, code, 1) == {order_id: "RESERVED"}
    assert await _used(db, code) == 1
    if kind == "flash":
        assert (await voucher_store.state(code)).remaining == 4


@pytest.mark.parametrize("kind", KINDS)
async def test_a_retry_after_sell_out_still_gets_its_first_answer(
    kind: str, http: aiohttp.ClientSession
) -> None:
    code = await _create(http, kind, 1)
    winner = _order_id()
    first = await _reserve(http, code, 7, winner)
    assert first[0] == 201
    # A loser sells the voucher out (and, for a flash voucher, raises the local flag) ...
    assert await _reserve(http, code, 8, _order_id()) == (409, {"error": "OUT_OF_STOCK"})
    # ... yet the winner's retry is answered as the first time, not OUT_OF_STOCK.
    assert await _reserve(http, code, 7, winner) == first


@pytest.mark.parametrize("kind", KINDS)
async def test_a_per_customer_limit_of_two(
    kind: str, http: aiohttp.ClientSession, db: asyncpg.Pool
) -> None:
    code = await _create(http, kind, 10, per_customer=2)
    mine = [await _reserve(http, code, 7, _order_id()) for _ in range(3)]
    assert [s for s, _ in mine] == [201, 201, 409]
    assert mine[2][1] == {"error": "ALREADY_USED"}
    assert (await _reserve(http, code, 8, _order_id()))[0] == 201
    await _stored(db, code, 3)
    assert await _used(db, code) == 3


@pytest.mark.parametrize("kind", KINDS)
async def test_expired_not_started_and_below_minimum_are_not_eligible(
    kind: str, http: aiohttp.ClientSession, db: asyncpg.Pool
) -> None:
    expired = await _create(http, kind, 5, starts_in_s=-7200, ends_in_s=-3600)
    later = await _create(http, kind, 5, starts_in_s=3600, ends_in_s=7200)
    minimum = await _create(http, kind, 5, min_order=5000)
    cases = [(expired, 10_000, "EXPIRED"), (later, 10_000, "NOT_STARTED")]
    cases.append((minimum, 4999, "BELOW_MIN_ORDER"))
    for code, amount, reason in cases:
        answer = await _reserve(http, code, 1, _order_id(), amount)
        assert answer == (422, {"error": "NOT_ELIGIBLE", "reason": reason}), code
    assert (await _reserve(http, minimum, 1, _order_id(), 5000))[0] == 201
    await _stored(db, minimum, 1)
    for code in (expired, later):
        assert await _used(db, code) == 0 and await _rows(db, code) == {}


# Release, confirm, expiry.


@pytest.mark.parametrize("kind", KINDS)
async def test_reserve_release_release_again_gives_one_use_back(
    kind: str, http: aiohttp.ClientSession, db: asyncpg.Pool, voucher_store: VoucherStore
) -> None:
    code = await _create(http, kind, 1)
    order_id = _order_id()
    assert (await _reserve(http, code, 1, order_id))[0] == 201
    path = f"/vouchers/{code}/reservations/{order_id}"
    released = {"orderId": order_id, "status": "RELEASED"}
    assert await _settled(http, "DELETE", path) == (200, released)
    assert await _settled(http, "DELETE", path) == (200, released)
    assert await _used(db, code) == 0
    assert await _rows(db, code) == {order_id: "RELEASED"}
    if kind == "flash":
        state = await voucher_store.state(code)
        assert (state.remaining, state.holds, state.customers) == (1, 0, 0)
    # The released orderId is not taken again; exactly one use came back.
    assert await _reserve(http, code, 1, order_id) == (409, {"error": "RESERVATION_EXPIRED"})
    assert (await _reserve(http, code, 1, _order_id()))[0] == 201
    assert await _reserve(http, code, 2, _order_id()) == (409, {"error": "OUT_OF_STOCK"})
    await until(lambda: _used_is(db, code, 1))


async def _used_is(db: asyncpg.Pool, code: str, expected: int) -> bool:
    return await _used(db, code) == expected


@pytest.mark.parametrize("kind", KINDS)
async def test_confirm_is_idempotent_and_a_confirmed_use_is_spent(
    kind: str, http: aiohttp.ClientSession, db: asyncpg.Pool
) -> None:
    code = await _create(http, kind, 3)
    order_id = _order_id()
    assert (await _reserve(http, code, 1, order_id))[0] == 201
    path = f"/vouchers/{code}/reservations/{order_id}"
    confirmed = (200, {"orderId": order_id, "status": "CONFIRMED"})
    assert await _settled(http, "POST", f"{path}/confirm") == confirmed
    assert await _settled(http, "POST", f"{path}/confirm") == confirmed
    assert (await _call(http, "DELETE", path))[:2] == (409, {"error": "ALREADY_CONFIRMED"})
    unknown = f"/vouchers/{code}/reservations/{_order_id()}"
    assert (await _call(http, "POST", f"{unknown}/confirm"))[:2] == (
        404,
        {"error": "RESERVATION_NOT_FOUND"},
    )
    assert (await _call(http, "DELETE", unknown))[:2] == (404, {"error": "RESERVATION_NOT_FOUND"})
    assert await _rows(db, code) == {order_id: "CONFIRMED"}
    assert await _used(db, code) == 1


async def test_a_flash_use_the_writer_has_not_stored_yet_is_processing(
    http: aiohttp.ClientSession, voucher_store: VoucherStore
) -> None:
    code = await _create(http, "flash", 2)
    order_id = _order_id()  # a use Redis granted whose event is not in the database yet
    assert (await voucher_store.reserve(code, 5, order_id, 1, b"in flight")).remaining == 1
    try:
        path = f"/vouchers/{code}/reservations/{order_id}"
        for method, suffix in (("POST", "/confirm"), ("DELETE", "")):
            status, answer, headers = await _call(http, method, path + suffix)
            assert (status, answer) == (409, {"error": "RESERVATION_PROCESSING"})
            assert headers["Retry-After"] == "1"
    finally:
        await voucher_store.router.client.hdel(voucher_keys(code).outbox, order_id)
        assert await voucher_store.release(code, order_id, ended=False)


@pytest.fixture
def short_hold_gateway(
    live_stack: Settings, env: dict[str, str], voucher_writer: None
) -> Iterator[str]:
    gateway_env = _gateway_env(env, voucher_hold_seconds=3)
    with running_gateway(live_stack, SHORT_HOLD_PORT, **gateway_env) as base:
        yield base


async def test_unconfirmed_reservations_expire_once_and_come_back(
    short_hold_gateway: str, db: asyncpg.Pool, voucher_store: VoucherStore
) -> None:
    async with client_session(short_hold_gateway) as http:
        # The writer first joins its group: wait for one stored use before the 3 s hold counts.
        warm = await _create(http, "flash", 1)
        assert (await _reserve(http, warm, 1, _order_id()))[0] == 201
        await _stored(db, warm, 1)
        codes = {kind: await _create(http, kind, 3) for kind in KINDS}
        taken = {kind: [(c, _order_id()) for c in (1, 2, 3)] for kind in KINDS}  # customer, orderId
        for kind, code in codes.items():
            for customer, order_id in taken[kind]:
                assert (await _reserve(http, code, customer, order_id))[0] == 201
            kept = taken[kind][0][1]
            answer = await _settled(http, "POST", f"/vouchers/{code}/reservations/{kept}/confirm")
            assert answer[0] == 200, answer
            await _stored(db, code, 3)

        async def all_due() -> bool:
            due: bool = await db.fetchval(
                "select bool_and(expires_at <= now()) from voucher_redemption"
                " where voucher_code = any($1::text[]) and status = 'RESERVED'",
                list(codes.values()),
            )
            return due

        await until(all_due)
        # Two expiry jobs at once: every due reservation ends once, and its use comes back once.
        router = voucher_store.router
        expired = await asyncio.gather(expire_once(db, router), expire_once(db, router))
        assert sum(expired) >= 4

        for kind, code in codes.items():
            statuses = await _rows(db, code)
            assert sorted(statuses.values()) == ["CONFIRMED", "EXPIRED", "EXPIRED"], kind
            assert await _used(db, code) == 1
            if kind == "flash":
                state = await voucher_store.state(code)
                assert (state.remaining, state.holds, state.customers) == (2, 1, 1)
            late = taken[kind][1][1]
            confirm = f"/vouchers/{code}/reservations/{late}/confirm"
            assert (await _call(http, "POST", confirm))[:2] == (
                409,
                {"error": "RESERVATION_EXPIRED"},
            )
            # The two uses are back, and only two.
            again = [await _reserve(http, code, c, _order_id()) for c in (4, 5, 6)]
            assert [s for s, _ in again] == [201, 201, 409], kind
        assert await expire_once(db, voucher_store.router) >= 0


# The database is the last guard.


def _produce(vcfg: Settings, events: list[VoucherReserved]) -> None:
    """Voucher events as the gateway produces them, on one partition: the writer sees them in
    this order."""
    producer = Producer({"bootstrap.servers": vcfg.kafka_bootstrap, "acks": "all"})
    for event in events:
        producer.produce(vcfg.vouchers_topic, encode(event), event.order_id.encode(), partition=0)
    assert producer.flush(30) == 0


def _events(code: str, granted: list[tuple[str, int]]) -> list[VoucherReserved]:
    now_ms = int(time.time() * 1000)
    return [
        VoucherReserved(o, code, c, 500_000, 100_000, now_ms, now_ms + 900_000) for o, c in granted
    ]


async def test_the_writer_refuses_uses_redis_granted_past_the_limit(
    http: aiohttp.ClientSession, db: asyncpg.Pool, voucher_store: VoucherStore, vcfg: Settings
) -> None:
    code = await _create(http, "flash", 2)
    granted = [(f"ord-{uuid.uuid4().hex}", customer) for customer in (1, 2, 3)]
    await voucher_store.load(code, 0, granted, [])  # a Redis that (after a failover) granted three
    await asyncio.to_thread(_produce, vcfg, _events(code, granted))
    stored = await _stored(db, code, 3)
    assert [stored[o] for o, _ in granted] == ["RESERVED", "RESERVED", "FAILED"]
    assert await _used(db, code) == 2
    refused = granted[2][0]
    reason = await db.fetchval(
        "select failure_reason from voucher_redemption where order_id = $1", refused
    )
    assert reason.startswith("out of stock")
    confirm = f"/vouchers/{code}/reservations/{refused}/confirm"
    assert (await _call(http, "POST", confirm))[:2] == (409, {"error": "RESERVATION_FAILED"})

    async def forfeited() -> bool:
        return refused not in await voucher_store.holds(code)

    await until(forfeited)
    # The use Redis invented is dropped with the refused hold, not given back to be sold again:
    # Redis and the database agree without a re-arm.
    state = await voucher_store.state(code)
    assert (state.remaining, state.holds, state.customers) == (0, 2, 2)
    [report] = await reconcile_vouchers(vcfg, db, voucher_store, [code])
    assert report.drift == 0
    assert await _reserve(http, code, 4, _order_id()) == (409, {"error": "OUT_OF_STOCK"})


async def test_a_use_redis_forgot_is_re_asserted_once_stored(
    http: aiohttp.ClientSession, db: asyncpg.Pool, voucher_store: VoucherStore, vcfg: Settings
) -> None:
    code = await _create(http, "flash", 3)
    forgotten = (_order_id(), 1)
    # What a replica promoted before it got the reservation holds: the use back, no hold.
    await voucher_store.load(code, 3, [], [])
    await asyncio.to_thread(_produce, vcfg, _events(code, [forgotten]))
    assert await _stored(db, code, 1) == {forgotten[0]: "RESERVED"}

    async def restored() -> bool:
        return forgotten[0] in await voucher_store.holds(code)

    await until(restored)
    state = await voucher_store.state(code)
    assert (state.remaining, state.holds, state.customers) == (2, 1, 1)
    [report] = await reconcile_vouchers(vcfg, db, voucher_store, [code])
    assert report.drift == 0
    # The customer's retry is answered as the first time; the use is not taken twice.
    assert (await _reserve(http, code, 1, forgotten[0]))[0] == 201
    assert (await voucher_store.state(code)).remaining == 2


async def test_reconciliation_finds_lost_and_stale_holds_and_fix_releases_stale(
    http: aiohttp.ClientSession, db: asyncpg.Pool, voucher_store: VoucherStore, vcfg: Settings
) -> None:
    code = await _create(http, "flash", 5)
    order_ids = [_order_id() for _ in range(3)]
    for customer, order_id in enumerate(order_ids, 1):
        assert (await _reserve(http, code, customer, order_id))[0] == 201
    await _stored(db, code, 3)
    keys = voucher_keys(code)
    # A hold lost by a failover, and one the database ended without Redis hearing of it.
    await voucher_store.router.client.hdel(keys.holds, order_ids[0])
    await db.execute(
        "update voucher_redemption set status = 'RELEASED' where order_id = $1", order_ids[1]
    )
    await db.execute("update voucher set used_count = used_count - 1 where code = $1", code)
    [report] = await reconcile_vouchers(vcfg, db, voucher_store, [code])
    assert (report.lost, len(report.stale)) == (1, 1)
    [report] = await reconcile_vouchers(vcfg, db, voucher_store, [code], fix=True)
    assert (report.lost, len(report.stale)) == (1, 0)
    assert report.remaining == 3  # the stale hold's use is back


# The edges: tokens, bodies, codes, metrics.


async def test_bad_tokens_bodies_and_codes_are_4xx_and_take_nothing(
    http: aiohttp.ClientSession, db: asyncpg.Pool
) -> None:
    code = await _create(http, "ordinary", 5)
    path = f"/vouchers/{code}/reservations"
    good = {"customerId": 1, "orderId": _order_id(), "orderAmount": 10}
    for headers in ({}, {"Authorization": "Bearer nope"}, ADMIN, {"Authorization": "dev"}):
        answer = await _call(http, "POST", path, json=good, headers=headers)
        assert answer[:2] == (401, {"error": "UNAUTHORIZED"}), headers
    bodies: list[Any] = [
        b"{not json",
        b"[]",
        b"",
        b"\xff\xfe",
        {"customerId": "1", "orderId": "o", "orderAmount": 1},
        {"customerId": 1, "orderId": "o", "orderAmount": 1, "extra": True},
        {"customerId": 1, "orderId": "o"},
        {"customerId": 1, "orderId": "o", "orderAmount": -1},
        {"customerId": 0, "orderId": "o", "orderAmount": 1},
        {"customerId": 2**63, "orderId": "o", "orderAmount": 1},
        {"customerId": 1, "orderId": "has space", "orderAmount": 1},
        {"customerId": 1, "orderId": "x" * 129, "orderAmount": 1},
        {"customerId": 1, "orderId": "nul\u0000", "orderAmount": 1},
        {"customerId": 1, "orderId": "", "orderAmount": 1},
        b'{"customerId": 1, "orderId": "o", "orderAmount": 1' + b" " * 70_000 + b"}",
    ]
    for body in bodies:
        kwargs: dict[str, Any] = {"data": body} if isinstance(body, bytes) else {"json": body}
        status, refused, _ = await _call(http, "POST", path, **kwargs)
        assert status == 400 and refused["error"] in ("INVALID_REQUEST", "BODY_TOO_LARGE"), body
    for unknown in ("NOPE-" + uuid.uuid4().hex, "bad.code", "x" * 65):
        reply = await _call(http, "POST", f"/vouchers/{unknown}/reservations", json=good)
        assert reply[:2] == (404, {"error": "VOUCHER_NOT_FOUND"}), unknown
    assert await _used(db, code) == 0 and await _rows(db, code) == {}

    now = dt.datetime.now(dt.UTC)
    new = {
        "code": code,
        "discountAmount": 1,
        "totalLimit": 1,
        "startsAt": now.isoformat(),
        "endsAt": (now + dt.timedelta(hours=1)).isoformat(),
    }
    assert (await _call(http, "POST", "/admin/vouchers", json=new))[0] == 401
    exists = await _call(http, "POST", "/admin/vouchers", json=new, headers=ADMIN)
    assert exists[:2] == (409, {"error": "VOUCHER_EXISTS"})
    for change in (
        {"perCustomerLimit": 0},
        {"discountAmount": 0},
        {"endsAt": now.isoformat()},
        {"startsAt": "2026-01-01T00:00:00"},
        {"code": "bad code"},
        {"isFlash": "yes"},
    ):
        bad = new | {"code": f"B-{uuid.uuid4().hex[:8]}"} | change
        answer = await _call(http, "POST", "/admin/vouchers", json=bad, headers=ADMIN)
        assert answer[:2][0] == 400 and answer[1]["error"] == "INVALID_REQUEST", change


# Moments a time zone pushes past year 9999 or before year 1 once in UTC (the driver's form).
OUT_OF_RANGE = [
    ("2030-01-01T00:00:00+00:00", "9999-12-31T23:59:59-01:00", "endsAt"),
    ("0001-01-01T00:00:00+01:00", "2030-01-01T00:00:00+00:00", "startsAt"),
]


@pytest.mark.parametrize(("starts", "ends", "field"), OUT_OF_RANGE)
async def test_a_date_out_of_range_in_utc_is_a_400_and_writes_nothing(
    starts: str, ends: str, field: str, http: aiohttp.ClientSession, db: asyncpg.Pool
) -> None:
    code = f"D-{uuid.uuid4().hex[:16]}"
    name = f"dates-{code}"
    voucher = {"code": code, "discountAmount": 1, "totalLimit": 1}
    sale = {"name": name, "items": [{"productId": "sku", "quantity": 1, "price": 1}]}
    for path, body in (("/admin/vouchers", voucher), ("/admin/sales", sale)):
        window = {"startsAt": starts, "endsAt": ends}
        status, refused, headers = await _call(
            http, "POST", path, json=body | window, headers=ADMIN
        )
        assert (status, refused["error"]) == (400, "INVALID_REQUEST"), (path, refused)
        assert field in refused.get("detail", ""), refused
        assert "Retry-After" not in headers
    assert await db.fetchval("select count(*) from voucher where code = $1", code) == 0
    assert await db.fetchval("select count(*) from flash_sale where name = $1", name) == 0


CONFLICT = (409, {"error": "ORDER_ID_CONFLICT"})


async def test_an_order_carries_one_voucher_use_by_default(http: aiohttp.ClientSession) -> None:
    ordinary, other, flash = (
        await _create(http, "ordinary", 5),
        await _create(http, "ordinary", 5),
        await _create(http, "flash", 5),
    )
    order_id = _order_id()
    assert (await _reserve(http, ordinary, 1, order_id))[0] == 201
    assert await _reserve(http, ordinary, 2, order_id) == CONFLICT
    # One use per order: the owner's same order on another voucher, of either kind, too.
    assert await _reserve(http, other, 1, order_id) == CONFLICT
    assert await _reserve(http, flash, 1, order_id) == CONFLICT
    flash_order = _order_id()
    first = await _reserve(http, flash, 1, flash_order)
    assert first[0] == 201, first
    assert await _reserve(http, flash, 2, flash_order) == CONFLICT
    assert await _reserve(http, ordinary, 1, flash_order) == CONFLICT
    # A use refused for another reason leaves the order free for another voucher.
    sold = await _create(http, "ordinary", 0)
    free = _order_id()
    assert await _reserve(http, sold, 1, free) == (409, {"error": "OUT_OF_STOCK"})
    assert (await _reserve(http, other, 1, free))[0] == 201


async def _taken(http: aiohttp.ClientSession, code: str) -> int:
    """Uses taken where the voucher decides: Redis for a flash one, else the database."""
    status, counters, _ = await _call(http, "GET", f"/admin/vouchers/{code}", headers=ADMIN)
    assert status == 200, counters
    if counters["isFlash"]:
        return int(counters["totalLimit"] - counters["redis"]["remaining"])
    return int(counters["usedCount"])


@pytest.mark.parametrize(("mine", "theirs"), [(a, b) for a in KINDS for b in KINDS])
async def test_another_customers_order_id_on_another_voucher_is_a_conflict(
    mine: str, theirs: str, combining: aiohttp.ClientSession
) -> None:
    first, second = await _create(combining, mine, 5), await _create(combining, theirs, 5)
    order_id = _order_id()
    assert (await _reserve(combining, first, 1, order_id))[0] == 201
    assert await _reserve(combining, second, 2, order_id) == CONFLICT
    assert await _taken(combining, second) == 0  # no use taken, no discount given
    # The owner may still combine it with that voucher (this gateway lets orders combine).
    assert (await _reserve(combining, second, 1, order_id))[0] == 201


ROUNDS = 25


@pytest.mark.parametrize(("one", "other"), [("flash", "flash"), ("flash", "ordinary")])
async def test_two_customers_racing_one_order_id_over_two_vouchers_get_one_use(
    one: str, other: str, combining: aiohttp.ClientSession
) -> None:
    codes = [await _create(combining, one, ROUNDS), await _create(combining, other, ROUNDS)]
    winners: Counter[int] = Counter()
    for round_ in range(ROUNDS):
        order_id = _order_id()
        customers = (2 * round_ + 1, 2 * round_ + 2)  # fresh ones: the per-customer limit is 1
        answers = await asyncio.gather(
            *(_reserve(combining, c, b, order_id) for c, b in zip(codes, customers, strict=True))
        )
        assert sorted(status for status, _ in answers) == [201, 409], answers
        assert CONFLICT in answers, answers
        winners[[s for s, _ in answers].index(201)] += 1
    assert sum([await _taken(combining, code) for code in codes]) == ROUNDS
    assert sum(winners.values()) == ROUNDS


async def test_one_customer_racing_one_order_over_two_vouchers_gets_one_use_by_default(
    http: aiohttp.ClientSession,
) -> None:
    codes = [await _create(http, "flash", ROUNDS), await _create(http, "ordinary", ROUNDS)]
    for customer in range(1, ROUNDS + 1):
        order_id = _order_id()
        answers = await asyncio.gather(*(_reserve(http, c, customer, order_id) for c in codes))
        assert sorted(status for status, _ in answers) == [201, 409], answers
    assert sum([await _taken(http, code) for code in codes]) == ROUNDS


async def test_the_database_alone_keeps_an_order_id_to_its_first_customer(
    http: aiohttp.ClientSession, db: asyncpg.Pool
) -> None:
    """Below the Redis claim: two ordinary reserves under one orderId, two customers, two
    vouchers, at once on two connections: the owner row admits one."""
    codes = [await _create(http, "ordinary", ROUNDS) for _ in range(2)]
    for round_ in range(ROUNDS):
        order_id = _order_id()
        wanted = [ReservationRequest(2 * round_ + n, order_id, 500_000) for n in (1, 2)]
        outcomes = await asyncio.gather(
            *(reserve_ordinary(db, c, w, 60, True) for c, w in zip(codes, wanted, strict=True))
        )
        assert sorted(o.outcome.value for o in outcomes) == ["ORDER_ID_CONFLICT", "RESERVED"]
    assert sum([await _used(db, code) for code in codes]) == ROUNDS


async def test_under_the_out_of_stock_flag_another_customer_reusing_an_order_id_conflicts(
    http: aiohttp.ClientSession, voucher_store: VoucherStore
) -> None:
    code = await _create(http, "flash", 1)
    held = _order_id()
    first = await _reserve(http, code, 1, held)
    assert first[0] == 201
    assert await _reserve(http, code, 2, _order_id()) == (409, {"error": "OUT_OF_STOCK"})
    # The flag is up now: another customer presenting the held orderId gets no discount ...
    assert await _reserve(http, code, 3, held) == CONFLICT
    # ... the holder's retry still gets its first answer, and one use is one discount.
    assert await _reserve(http, code, 1, held) == first
    assert await voucher_store.holds(code) == {held: 1}


# One order carrying several vouchers (a discount and a shipping voucher): one orderId, one
# reservation per code, each confirmable, none taken back by the writer.


async def _confirm_all(http: aiohttp.ClientSession, codes: list[str], order_id: str) -> None:
    confirmed = (200, {"orderId": order_id, "status": "CONFIRMED"})
    for code in codes:
        path = f"/vouchers/{code}/reservations/{order_id}/confirm"
        assert await _settled(http, "POST", path) == confirmed, code


async def _outbox_empty(store: VoucherStore, code: str) -> bool:
    return (await store.state(code)).outbox == 0


async def _nothing_stranded(
    db: asyncpg.Pool, voucher_store: VoucherStore, vcfg: Settings, flash: list[str], order_id: str
) -> None:
    """Each flash voucher holds the order's use, its outbox empty, no drift."""
    for code in flash:
        await until(functools.partial(_outbox_empty, voucher_store, code))
        assert await voucher_store.holds(code) == {order_id: 1}
    for report in await reconcile_vouchers(vcfg, db, voucher_store, flash):
        assert report.drift == 0 and (report.reserved, report.confirmed) == (0, 1), report


@pytest.mark.parametrize("first", ["ordinary", "flash"])
async def test_one_order_id_on_an_ordinary_and_a_flash_voucher_is_two_uses(
    first: str,
    combining: aiohttp.ClientSession,
    db: asyncpg.Pool,
    voucher_store: VoucherStore,
    vcfg: Settings,
) -> None:
    http = combining
    codes = {kind: await _create(http, kind, 5) for kind in KINDS}
    order_id = _order_id()
    then = "flash" if first == "ordinary" else "ordinary"
    for kind in (first, then):
        answer = await _reserve(http, codes[kind], 1, order_id)
        assert answer == (201, {"orderId": order_id, "discountAmount": 100_000}), kind
    await _confirm_all(http, [codes[first], codes[then]], order_id)
    for code in codes.values():
        assert await _rows(db, code) == {order_id: "CONFIRMED"}
        assert await _used(db, code) == 1
    await _nothing_stranded(db, voucher_store, vcfg, [codes["flash"]], order_id)


async def test_one_order_id_on_two_flash_vouchers_at_once_is_two_uses(
    combining: aiohttp.ClientSession,
    db: asyncpg.Pool,
    voucher_store: VoucherStore,
    vcfg: Settings,
) -> None:
    http = combining
    codes = [await _create(http, "flash", 5) for _ in range(2)]
    order_id = _order_id()
    answers = await asyncio.gather(*(_reserve(http, code, 1, order_id) for code in codes))
    assert answers == [(201, {"orderId": order_id, "discountAmount": 100_000})] * 2
    await _confirm_all(http, codes, order_id)
    for code in codes:
        assert await _rows(db, code) == {order_id: "CONFIRMED"}
    await _nothing_stranded(db, voucher_store, vcfg, codes, order_id)


async def test_voucher_uses_are_in_the_metrics(http: aiohttp.ClientSession) -> None:
    code = await _create(http, "flash", 1)
    assert (await _reserve(http, code, 1, _order_id()))[0] == 201
    assert (await _reserve(http, code, 2, _order_id()))[0] == 409
    async with http.get("/metrics") as response:
        text = await response.text()
    assert 'flashsale_voucher_reservations_total{kind="flash",outcome="reserved"}' in text
    assert 'flashsale_voucher_reservations_total{kind="flash",outcome="out_of_stock"}' in text
    assert f'flashsale_voucher_remaining{{code="{code}"}} 0.0' in text


@pytest.mark.faults
async def test_a_gateway_killed_between_redis_and_kafka_leaves_no_ghost_hold(
    live_stack: Settings,
    env: dict[str, str],
    gateway: str,
    http: aiohttp.ClientSession,
    db: asyncpg.Pool,
    voucher_store: VoucherStore,
) -> None:
    """The use is in Redis with its outbox entry; the surviving gateway's relay sends it."""
    code = await _create(http, "flash", 3)
    order_id = _order_id()
    doomed_env = _gateway_env(env, failpoints=("gateway.after_voucher_reserve",))
    with running_gateway(live_stack, SHORT_HOLD_PORT, **doomed_env) as doomed:
        async with client_session(doomed) as other:
            with pytest.raises(aiohttp.ClientError):
                await _reserve(other, code, 9, order_id)
    # Taken; Kafka never saw it from that one.
    assert await voucher_store.holds_order(code, order_id)
    assert await _stored(db, code, 1) == {order_id: "RESERVED"}
    assert await _used(db, code) == 1

    async def acked() -> bool:
        return await voucher_store.outbox(code) == {}

    await until(acked)
    # The caller's retry gets the first answer; the use is not taken twice.
    assert await _reserve(http, code, 9, order_id) == (
        201,
        {"orderId": order_id, "discountAmount": 100_000},
    )
    assert (await voucher_store.state(code)).remaining == 2
