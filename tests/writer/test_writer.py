"""The order writer against the real stack: each test has its own orders and dead-letter topics,
its own writer group and fresh item rows, and runs in-process writers until the topic is drained."""

from __future__ import annotations

import asyncio
import functools
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest
from redis.asyncio.cluster import RedisCluster

from kernel.events import OrderPlaced, VoucherReserved, decode, encode
from kernel.ids import new_order_id
from kernel.settings import Settings
from rig.waiting import until
from shard_router import Outcome, ShardRouter, shard_keys
from tests.support.writer import (
    PARTITIONS,
    Topics,
    drain,
    make_item,
    messages,
    order,
    produce,
    read_all,
    rows,
    snapshot,
    sold,
    topics,
)
from writer import ORDERS, DeadLetter, Record, WriterStats, parse, run
from writer.metrics import REGISTRY
from writer.metrics import serve as metrics_serve

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.fixture
async def t(live_stack: Settings) -> AsyncIterator[Topics]:
    async with topics(live_stack) as made:
        yield made


# Pure: parsing a batch.


def _record(value: bytes | None, offset: int = 0, partition: int = 0) -> Record:
    return Record("orders", partition, offset, None, value)


async def _written(
    t: Topics, events: list[OrderPlaced], partition: Callable[[int], int] | None = None
) -> None:
    """Send ``events`` to the test's orders topic (``partition`` as messages() takes it), and
    run a writer until it has stored them all."""
    await produce(t.cfg, t.orders, messages(events, partition))
    await drain(t.cfg)


async def _one_row_each(
    t: Topics, db: asyncpg.Pool, *, quantity: int, buyers: int
) -> tuple[int, list[OrderPlaced], dict[str, asyncpg.Record]]:
    """A new item of ``quantity`` units and one order from each of ``buyers`` users, written:
    the item, the orders, and their rows, one per order (asserted)."""
    item = await make_item(db, quantity=quantity)
    events = [order(item, user) for user in range(1, buyers + 1)]
    await _written(t, events)
    stored = await rows(db, item)
    assert set(stored) == {e.order_id for e in events}
    return item, events, stored


def test_parse_splits_orders_from_dead_letters_and_tracks_offsets() -> None:
    good = order(1, 7)
    voucher = VoucherReserved("v1", "CODE", 7, 1000, 100, 0, 0)
    bad_id = order(1, 8, order_id="not-a-uuid")
    bad_time = order(1, 9, created_at_ms=10**18)
    batch = parse(
        [
            _record(encode(good), 4),
            _record(b"not json", 5),
            _record(None, 6),
            _record(encode(voucher), 7),
            _record(encode(bad_id), 8),
            _record(encode(bad_time), 9),
            _record(encode(good), 2, partition=1),
        ],
        ORDERS,
    )
    assert [o.event for o in batch.rows] == [good, good]
    assert [(d.record.offset, d.kind) for d in batch.dead_letters] == [
        (5, "poison"),
        (6, "poison"),
        (7, "unsupported"),
        (8, "invalid"),
        (9, "invalid"),
    ]
    assert all(isinstance(d, DeadLetter) and d.reason for d in batch.dead_letters)
    assert batch.offsets == {("orders", 0): 10, ("orders", 1): 3}


# 1. Every order becomes exactly one row.


async def test_every_order_becomes_exactly_one_row(t: Topics, db: asyncpg.Pool) -> None:
    item, events, stored = await _one_row_each(t, db, quantity=500, buyers=200)
    for e in events:
        row = stored[e.order_id]
        assert (row["user_id"], row["shard"], row["status"]) == (e.user_id, e.shard, "PENDING")
        assert round(row["created_at"].timestamp() * 1000) == e.created_at_ms
        assert round(row["expires_at"].timestamp() * 1000) == e.expires_at_ms
        assert row["failure_reason"] is None
    assert len({r["user_id"] for r in stored.values()}) == len(events)
    assert await sold(db, item) == len(events)
    assert await read_all(t.cfg, t.deadletter, expect=0, timeout_s=1) == []


# 2. Duplicate delivery changes nothing.


async def test_duplicates_and_a_replay_change_nothing(t: Topics, db: asyncpg.Pool) -> None:
    item = await make_item(db, quantity=100)
    events = [order(item, user) for user in range(1, 121)]  # 20 more than the stock
    batch = messages(events)
    # Every message twice, the copy on another partition (a relay re-send with a new key).
    copies = [(k, v, (p + 1) % PARTITIONS) for k, v, p in batch]
    await produce(t.cfg, t.orders, batch + copies)
    await drain(t.cfg)
    first = await snapshot(db, item)
    first_rows = await rows(db, item)
    assert len(first_rows) == len(events) and first[0] == 100
    assert sum(r["status"] == "PENDING" for r in first_rows.values()) == 100

    # The whole topic again, from offset 0, by a new group.
    await drain(t.writer())

    assert await snapshot(db, item) == first
    assert await rows(db, item) == first_rows


# 4. Refused orders: oversold by Redis, a second order of a buyer, poison.


async def test_more_orders_than_stock_fail_past_the_quantity(t: Topics, db: asyncpg.Pool) -> None:
    item, _, stored = await _one_row_each(t, db, quantity=7, buyers=30)
    pending = {i for i, r in stored.items() if r["status"] == "PENDING"}
    failed = {i for i, r in stored.items() if r["status"] == "FAILED"}
    assert len(pending) == 7 and len(failed) == 23
    assert all(stored[i]["failure_reason"].startswith("sold out") for i in failed)
    assert await sold(db, item) == 7
    letters = await read_all(t.cfg, t.deadletter, expect=23)
    assert {order_id_of(x["payload"]) for x in letters} == failed
    for letter in letters:
        assert letter["reason"].startswith("sold out")
        assert letter["topic"] == t.orders
        assert 0 <= letter["partition"] < PARTITIONS and letter["offset"] >= 0


async def test_a_buyers_second_order_for_the_item_fails(t: Topics, db: asyncpg.Pool) -> None:
    item = await make_item(db, quantity=10)
    first, second = order(item, 42), order(item, 42)
    other_item = await make_item(db, quantity=10)
    elsewhere = order(other_item, 42)  # the same buyer may hold one order per item
    await _written(t, [first, second, elsewhere], lambda i: 0)

    stored = await rows(db, item)
    assert stored[first.order_id]["status"] == "PENDING"
    assert stored[second.order_id]["status"] == "FAILED"
    assert stored[second.order_id]["failure_reason"].startswith("already active")
    assert first.order_id in stored[second.order_id]["failure_reason"]
    assert (await rows(db, other_item))[elsewhere.order_id]["status"] == "PENDING"
    assert await sold(db, item) == 1 and await sold(db, other_item) == 1
    [letter] = await read_all(t.cfg, t.deadletter, expect=1)
    assert order_id_of(letter["payload"]) == second.order_id
    assert (letter["partition"], letter["offset"]) == (0, 1)


async def test_poison_goes_to_the_dead_letters_and_the_writer_goes_on(
    t: Topics, db: asyncpg.Pool
) -> None:
    item = await make_item(db, quantity=10)
    before, after = order(item, 1), order(item, 2)
    unknown = order(10**12 + int(uuid.uuid4().int % 10**6), 3)  # no such item
    voucher = encode(VoucherReserved("v-1", "CODE", 3, 1000, 100, 0, 0))
    poison: list[tuple[bytes, bytes, int]] = [
        (b"p", b"not json", 0),
        (b"v", voucher, 0),
        (b"u", encode(unknown), 0),
    ]
    batch = messages([before], lambda i: 0) + poison + messages([after], lambda i: 0)
    await produce(t.cfg, t.orders, batch)

    await drain(t.cfg)

    stored = await rows(db, item)
    assert {i: r["status"] for i, r in stored.items()} == {
        before.order_id: "PENDING",
        after.order_id: "PENDING",
    }
    letters = await read_all(t.cfg, t.deadletter, expect=3)
    by_offset = {x["offset"]: x for x in letters}
    assert sorted(by_offset) == [1, 2, 3]
    assert (
        by_offset[1]["reason"].startswith("undecodable") and by_offset[1]["payload"] == "not json"
    )
    assert by_offset[2]["reason"] == "unsupported event type: voucher_reserved"
    assert by_offset[3]["reason"].startswith("unknown item")
    assert all(x["topic"] == t.orders and x["partition"] == 0 for x in letters)


# 5. A refused order gives its unit back in Redis, once, even across a replay; one refused for
# capacity forfeits its hold instead (its unit was never there).


async def test_a_buyers_second_order_gives_its_unit_back_once(
    t: Topics, db: asyncpg.Pool, router: ShardRouter, redis: RedisCluster
) -> None:
    item = await make_item(db, quantity=2, shards=2)
    won = order(item, 2, shards=2)  # home shard 0, unit from shard 0
    # Redis forgot the buyer's dedup entry (a failover), so their second order got a unit too.
    second = order(item, 2, shards=2)
    redis_was_wrong = [(won.order_id, won.user_id), (second.order_id, second.user_id)]
    await router.load_shard(item, 0, 0, redis_was_wrong, [(second.user_id, second.order_id)])
    await router.load_shard(item, 1, 0, [], [])
    outbox = shard_keys(item, 0).outbox
    await redis.hset(outbox, mapping={won.order_id: encode(won), second.order_id: encode(second)})
    try:
        await _written(t, [won, second], lambda i: 0)

        stored = await rows(db, item)
        assert stored[won.order_id]["status"] == "PENDING"
        assert stored[second.order_id]["status"] == "FAILED"
        assert stored[second.order_id]["failure_reason"].startswith("already active")
        assert await sold(db, item) == 1
        states = await router.shard_states(item, 2)
        assert (states[0].stock, states[0].holds, states[0].buyers) == (1, 1, 1)
        assert states[0].outbox == 0  # both orders are settled: the outbox drained
        assert await router.holds(item, 0) == {won.order_id: won.user_id}
        # The buyer's entry names the order the database kept.
        assert await router.buyer_order(item, 2, won.user_id) == won.order_id

        # A crash between the commit and the release: the hold is back, the batch comes again.
        await router.load_shard(item, 0, 0, redis_was_wrong, [(second.user_id, second.order_id)])
        await drain(t.writer())
        states = await router.shard_states(item, 2)
        assert (states[0].stock, states[0].holds, states[0].buyers) == (1, 1, 1)
        # And once more with nothing to release: the unit is not given back twice.
        await drain(t.writer())
        states = await router.shard_states(item, 2)
        assert (states[0].stock, states[0].holds) == (1, 1)
        assert await rows(db, item) == stored and await sold(db, item) == 1
    finally:
        for k in range(2):
            await redis.delete(*shard_keys(item, k))


# 6. A Redis failover that loses an acknowledged reservation (WAIT is not consensus). What the
# promoted replica holds is emulated by undoing the reservation's Lua writes by hand: the unit
# back in stock, no hold record, no outbox entry, no dedup entry.

PHANTOM_SHARDS = 2
PHANTOM_LOADED = [3, 2]  # units loaded per shard: 5 in all


async def _load_phantom_item(db: asyncpg.Pool, router: ShardRouter) -> int:
    item = await make_item(db, quantity=sum(PHANTOM_LOADED), shards=PHANTOM_SHARDS)
    for shard, units in enumerate(PHANTOM_LOADED):
        await router.load_shard(item, shard, units, [], [])
    return item


async def _buy(router: ShardRouter, item: int, user: int) -> OrderPlaced | None:
    """A buyer's purchase as the gateway makes it: the order event written to the outbox of the
    shard the unit comes from; the event when a unit was taken."""
    order_id = new_order_id(item)

    def event(shard: int) -> OrderPlaced:
        return order(item, user, shards=PHANTOM_SHARDS, shard=shard, order_id=order_id)

    got = await router.reserve(item, PHANTOM_SHARDS, user, order_id, lambda k: encode(event(k)))
    return event(got.unit_shard) if got.outcome is Outcome.RESERVED else None


async def _buy_all(router: ShardRouter, item: int, users: range) -> list[OrderPlaced]:
    return [e for user in users if (e := await _buy(router, item, user)) is not None]


async def _forget(redis: RedisCluster, e: OrderPlaced) -> None:
    unit, home = shard_keys(e.item_id, e.shard), shard_keys(e.item_id, e.home_shard)
    assert await redis.hdel(unit.orders, e.order_id) == 1
    await redis.hdel(unit.outbox, e.order_id)
    await redis.incr(unit.stock)
    assert await redis.hdel(home.buyers, str(e.user_id)) == 1


async def _assert_units_add_up(
    db: asyncpg.Pool, router: ShardRouter, item: int
) -> list[tuple[int, int]]:
    """Per shard, units left + holds = units loaded; the holds are the active orders."""
    states = await router.shard_states(item, PHANTOM_SHARDS)
    per_shard = [(s.stock, s.holds) for s in states]
    assert [left + holds for left, holds in per_shard] == PHANTOM_LOADED, per_shard
    held = {o for k in range(PHANTOM_SHARDS) for o in await router.holds(item, k)}
    pending = {i for i, r in (await rows(db, item)).items() if r["status"] == "PENDING"}
    assert held == pending
    assert all(s.outbox == 0 for s in states)
    return per_shard


async def test_a_phantom_unit_is_sold_at_most_once_and_then_never_again(
    t: Topics, db: asyncpg.Pool, router: ShardRouter, redis: RedisCluster
) -> None:
    item = await _load_phantom_item(db, router)
    try:
        first = await _buy_all(router, item, range(1, 6))
        assert len(first) == 5
        await _written(t, first)
        a = first[0]
        await _forget(redis, a)  # the failover: buyer A's reservation is gone from Redis
        assert sum(s.stock for s in await router.shard_states(item, PHANTOM_SHARDS)) == 1

        # More buyers come, round after round: A's unit is sold once more, refused once, and
        # its hold forfeited without the unit; A's hold and dedup entry are re-asserted.
        rounds: list[list[OrderPlaced]] = []
        for users in (range(6, 16), range(16, 26), range(26, 36)):
            sold_now = await _buy_all(router, item, users)
            rounds.append(sold_now)
            await _written(t, sold_now)
        assert [len(r) for r in rounds] == [1, 0, 0]  # no loop: the phantom is sold only once

        stored = await rows(db, item)
        statuses = {i: r["status"] for i, r in stored.items()}
        assert sorted(statuses.values()) == ["FAILED"] + ["PENDING"] * 5
        assert await sold(db, item) == 5  # 0 units sold past the 5
        [phantom] = rounds[0]
        assert statuses[phantom.order_id] == "FAILED"
        assert stored[phantom.order_id]["failure_reason"].startswith("sold out")
        assert all(statuses[e.order_id] == "PENDING" for e in first)
        per_shard = await _assert_units_add_up(db, router, item)
        assert [left for left, _ in per_shard] == [0, 0]
        assert sum(holds for _, holds in per_shard) == 5
        # A's dedup entry is back: A cannot buy a second unit.
        assert await _buy(router, item, a.user_id) is None
        assert await router.buyer_order(item, PHANTOM_SHARDS, a.user_id) == a.order_id
    finally:
        for k in range(PHANTOM_SHARDS):
            await redis.delete(*shard_keys(item, k))


async def test_an_order_redis_forgot_before_it_was_stored_takes_its_unit_back(
    t: Topics, db: asyncpg.Pool, router: ShardRouter, redis: RedisCluster
) -> None:
    item = await _load_phantom_item(db, router)
    try:
        first = await _buy_all(router, item, range(1, 6))
        a = first[0]
        await _forget(redis, a)  # the failover comes before the writer stores A's order
        await _written(t, first)
        # Storing A re-asserted its hold with its unit: nobody else can buy it.
        assert await _buy_all(router, item, range(6, 16)) == []
        assert await _buy(router, item, a.user_id) is None
        stored = await rows(db, item)
        assert sorted(r["status"] for r in stored.values()) == ["PENDING"] * 5
        assert await _assert_units_add_up(db, router, item) == [(0, 3), (0, 2)]

        # The same batch again (a replay): the unit is not taken twice.
        await drain(t.writer())
        assert await _assert_units_add_up(db, router, item) == [(0, 3), (0, 2)]
    finally:
        for k in range(PHANTOM_SHARDS):
            await redis.delete(*shard_keys(item, k))


# Several writers at once.


async def test_two_writers_in_one_group_share_the_partitions(t: Topics, db: asyncpg.Pool) -> None:
    item = await make_item(db, quantity=150)
    events = [order(item, user) for user in range(1, 301)]
    await produce(t.cfg, t.orders, messages(events))
    cfg = t.writer(writer_batch_size=10)
    stats = [WriterStats(), WriterStats()]
    stop = asyncio.Event()
    writers: list[asyncio.Task[None]] = []

    def start(s: WriterStats) -> None:
        writer = run(cfg, stop=stop, metrics_port=None, stats=s)
        writers.append(asyncio.create_task(asyncio.wait_for(writer, 60)))

    try:
        start(stats[0])
        await until(lambda: stats[0].batches > 0)
        start(stats[1])
        # Keep orders coming until the rebalance has handed the second writer a batch.
        user = len(events)
        while stats[1].batches == 0:
            assert not any(w.done() for w in writers)
            user += 1
            events.append(order(item, user))
            await produce(
                t.cfg, t.orders, messages(events[-1:], functools.partial(_fixed, user % PARTITIONS))
            )
            await asyncio.sleep(0.05)
        stored: dict[str, object] = {}
        while len(stored) < len(events):
            assert not any(w.done() for w in writers)
            stored = await rows(db, item)
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.gather(*writers)

    await _assert_sold_exactly(db, item, events, quantity=150)


async def test_two_groups_racing_over_the_same_orders(t: Topics, db: asyncpg.Pool) -> None:
    """Every order handled twice at the same time: the item row lock serialises the guard."""
    item = await make_item(db, quantity=150)
    events = [order(item, user) for user in range(1, 401)]
    events += [order(item, user) for user in range(1, 41)]  # second orders of 40 buyers
    await produce(t.cfg, t.orders, messages(events))

    await asyncio.gather(
        drain(t.writer(writer_batch_size=30)), drain(t.writer(writer_batch_size=70))
    )

    await _assert_sold_exactly(db, item, events, quantity=150)


async def _assert_sold_exactly(
    db: asyncpg.Pool, item: int, events: list[OrderPlaced], quantity: int
) -> None:
    stored = await rows(db, item)
    assert len(stored) == len(events)
    pending = [r for r in stored.values() if r["status"] == "PENDING"]
    assert len(pending) == quantity
    assert len({r["user_id"] for r in pending}) == quantity  # no buyer twice
    assert all(r["status"] in ("PENDING", "FAILED") for r in stored.values())
    assert await sold(db, item) == quantity


def order_id_of(payload: str) -> str:
    """The orderId inside a dead letter's payload."""
    event = decode(payload.encode())
    assert isinstance(event, OrderPlaced)
    return event.order_id


# Metrics.


async def test_metrics_count_batches_dead_letters_and_lag(t: Topics, db: asyncpg.Pool) -> None:
    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    item = await make_item(db, quantity=1)
    events = [order(item, user) for user in (1, 2)]
    batches_before = sample("flashsale_writer_batch_size_count")
    commits_before = sample("flashsale_writer_commit_seconds_count")
    refused_before = sample("flashsale_writer_dead_letters_total", kind="refused")
    poison_before = sample("flashsale_writer_dead_letters_total", kind="poison")
    await produce(t.cfg, t.orders, messages(events, lambda i: 0) + [(b"p", b"\xff not json", 1)])

    def lags() -> dict[str, float]:
        return {
            s.labels["partition"]: s.value
            for metric in REGISTRY.collect()
            if metric.name == "flashsale_writer_consumer_lag"
            for s in metric.samples
            if s.labels["topic"] == t.orders
        }

    stop = asyncio.Event()
    writer = asyncio.create_task(asyncio.wait_for(run(t.cfg, stop=stop, metrics_port=None), 60))
    try:
        # Every assigned partition is reported, caught up, while the writer runs.
        await until(lambda: lags() == dict.fromkeys("0123", 0.0) or writer.done())
        await until(lambda: sample("flashsale_writer_batch_size_count") > batches_before)
    finally:
        stop.set()
        await writer
    assert lags() == {}  # a writer that left the group reports none

    assert sample("flashsale_writer_commit_seconds_count") > commits_before
    assert sample("flashsale_writer_dead_letters_total", kind="refused") == refused_before + 1
    assert sample("flashsale_writer_dead_letters_total", kind="poison") == poison_before + 1
    letters = await read_all(t.cfg, t.deadletter, expect=2)
    assert {x["payload"] for x in letters} >= {"\\xff not json"}

    server = metrics_serve(0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())
    finally:
        server.shutdown()
        server.server_close()
    for name in (
        "flashsale_writer_batch_size",
        "flashsale_writer_commit_seconds",
        "flashsale_writer_consumer_lag",
        "flashsale_writer_dead_letters_total",
    ):
        assert name.encode() in body


def _fixed(partition: int, _index: int) -> int:
    return partition
