"""The order writer against the real stack: each test has its own orders and dead-letter topics,
its own writer group and fresh item rows, and runs in-process writers until the topic is drained."""

from __future__ import annotations

import asyncio
import functools
import urllib.request
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from redis.asyncio.cluster import RedisCluster

from kernel.events import OrderPlaced, VoucherReserved, decode, encode
from kernel.settings import Settings
from shard_router import ShardRouter, shard_keys
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
    until,
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
    item = await make_item(db, quantity=500)
    events = [order(item, user) for user in range(1, 201)]
    await produce(t.cfg, t.orders, messages(events))

    await drain(t.cfg)

    stored = await rows(db, item)
    assert set(stored) == {e.order_id for e in events}
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
    item = await make_item(db, quantity=7)
    events = [order(item, user) for user in range(1, 31)]
    await produce(t.cfg, t.orders, messages(events))

    await drain(t.cfg)

    stored = await rows(db, item)
    assert set(stored) == {e.order_id for e in events}
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
    await produce(t.cfg, t.orders, messages([first, second, elsewhere], lambda i: 0))

    await drain(t.cfg)

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


# 5. A refused order gives its unit back in Redis, once, even across a replay.


async def test_a_refused_order_gives_its_unit_back(
    t: Topics, db: asyncpg.Pool, router: ShardRouter, redis: RedisCluster
) -> None:
    item = await make_item(db, quantity=1, shards=2)
    won = order(item, 2, shards=2)  # home shard 0, unit from shard 0
    lost = order(item, 3, shards=2, shard=0)  # home shard 1, borrowed its unit from shard 0
    redis_was_wrong = [(won.order_id, won.user_id), (lost.order_id, lost.user_id)]
    await router.load_shard(item, 0, 0, redis_was_wrong, [(won.user_id, won.order_id)])
    await router.load_shard(item, 1, 0, [], [(lost.user_id, lost.order_id)])
    outbox = shard_keys(item, 0).outbox
    await redis.hset(outbox, mapping={won.order_id: encode(won), lost.order_id: encode(lost)})
    try:
        await produce(t.cfg, t.orders, messages([won, lost], lambda i: 0))
        await drain(t.cfg)

        stored = await rows(db, item)
        assert stored[won.order_id]["status"] == "PENDING"
        assert stored[lost.order_id]["status"] == "FAILED"
        assert await sold(db, item) == 1
        states = await router.shard_states(item, 2)
        assert (states[0].stock, states[0].holds, states[0].buyers) == (1, 1, 1)
        assert states[0].outbox == 0  # both orders are settled: the outbox drained
        assert states[1].buyers == 0  # the refused buyer may try again
        assert await router.holds(item, 0) == {won.order_id: won.user_id}

        # A crash between the commit and the release: the hold is back, the batch comes again.
        await router.load_shard(item, 0, 0, redis_was_wrong, [(won.user_id, won.order_id)])
        await drain(t.writer())
        states = await router.shard_states(item, 2)
        assert (states[0].stock, states[0].holds) == (1, 1)
        # And once more with nothing to release: the unit is not given back twice.
        await drain(t.writer())
        states = await router.shard_states(item, 2)
        assert (states[0].stock, states[0].holds) == (1, 1)
        assert await rows(db, item) == stored and await sold(db, item) == 1
    finally:
        for k in range(2):
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
