"""The local stack is real: each server takes a write and gives it back."""

from __future__ import annotations

import datetime as dt
import uuid

import asyncpg
import pytest
from confluent_kafka import Consumer, Producer
from redis.asyncio.cluster import RedisCluster

from flashsale.stack.redis_cluster import RedisCluster as LocalCluster
from kernel.settings import Settings

pytestmark = pytest.mark.integration


async def test_redis_cluster_takes_a_key_on_every_primary(
    redis: RedisCluster, live_stack: Settings
) -> None:
    primaries = LocalCluster(live_stack).primaries()
    assert len(primaries) >= 3
    seen: set[str] = set()
    token = uuid.uuid4().hex
    # Hash tags chosen until every primary owns one of the keys.
    for i in range(200):
        key = f"{{smoke:{i}}}:{token}"
        node = redis.get_node_from_key(key)
        assert node is not None
        address = f"{node.host}:{node.port}"
        if address in seen:
            continue
        await redis.set(key, address, ex=60)
        assert (await redis.get(key)) == address.encode()
        seen.add(address)
    assert seen == set(primaries)


def test_kafka_produces_and_consumes(live_stack: Settings) -> None:
    topic = "flashsale.healthcheck"
    payload = uuid.uuid4().bytes
    producer = Producer(
        {"bootstrap.servers": live_stack.kafka_bootstrap, "acks": "all", "enable.idempotence": True}
    )
    delivered: list[object] = []
    producer.produce(topic, payload, on_delivery=lambda err, msg: delivered.append(err or msg))
    assert producer.flush(15) == 0
    assert delivered and not isinstance(delivered[0], Exception)
    consumer = Consumer(
        {
            "bootstrap.servers": live_stack.kafka_bootstrap,
            "group.id": f"smoke-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    try:
        found = False
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and msg.value() == payload:
                found = True
                break
        assert found, "the produced message never came back"
    finally:
        consumer.close()


async def test_postgres_constraints_reject_an_oversold_item(db: asyncpg.Pool) -> None:
    now = dt.datetime.now(dt.UTC)
    async with db.acquire() as conn:
        sale_id = await conn.fetchval(
            "insert into flash_sale (name, starts_at, ends_at) values ('smoke', $1, $2) "
            "returning id",
            now,
            now + dt.timedelta(hours=1),
        )
        item_id = await conn.fetchval(
            "insert into flash_sale_item (sale_id, product_id, price, quantity) "
            "values ($1, 'p', 100, 2) returning id",
            sale_id,
        )
        await conn.execute("update flash_sale_item set sold = 2 where id = $1", item_id)
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute("update flash_sale_item set sold = 3 where id = $1", item_id)
        assert await conn.fetchval("select sold from flash_sale_item where id = $1", item_id) == 2
        # One active order per buyer and item; a second PENDING one is refused.
        insert = (
            "insert into flash_sale_order (id, item_id, user_id, shard, status, created_at,"
            " expires_at) values ($1, $2, 7, 0, $3, $4, $4)"
        )
        await conn.execute(insert, uuid.uuid4(), item_id, "EXPIRED", now)
        await conn.execute(insert, uuid.uuid4(), item_id, "PENDING", now)
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(insert, uuid.uuid4(), item_id, "PAID", now)
