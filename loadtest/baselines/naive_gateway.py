"""The baseline for the reserve path: the purchase written the obvious way, one request at a time.

Per request: verify the JWT with pyjwt (no cache), ONE ``EVALSHA reserve`` through redis-py's
RedisCluster on the buyer's home shard (no borrowing, no pipelining of its own), ONE confluent-kafka
produce (acks=all, idempotent, ``linger.ms=0``) whose delivery report it awaits, then 202. It uses
the project's Lua script, key names and event encoding, so only the orchestration differs from the
gateway. Configuration comes from the project's settings; the item's shard count from
``LOADTEST_NAIVE_SHARDS`` (default 8).

Run: ``granian --interface asgi --loop uvloop --workers 1 loadtest.baselines.naive_gateway:app``
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import jwt
import msgspec
from confluent_kafka import Producer
from redis.asyncio.cluster import ClusterNode, RedisCluster

from kernel.events import OrderPlaced, encode
from kernel.ids import new_order_id
from kernel.settings import Settings, settings
from shard_router import home_shard, shard_keys
from shard_router.scripts import RESERVE

Message = dict[str, Any]
Send = Callable[[Message], Awaitable[None]]
Receive = Callable[[], Awaitable[Message]]

PREFIX = "/api/flash-sales/items/"
SUFFIX = "/purchase"
PAYMENT_WINDOW_MS = 600_000
IO_DEADLINE_S = 5.0
json_encode = msgspec.json.Encoder().encode


class NaiveGateway:
    def __init__(self, cfg: Settings, shards: int) -> None:
        self.cfg = cfg
        self.shards = shards
        self.redis: RedisCluster | None = None
        self.producer: Producer | None = None
        self._polling = False
        self._poller: threading.Thread | None = None

    async def start(self) -> None:
        nodes = [
            ClusterNode(h, int(p)) for h, p in (n.rsplit(":", 1) for n in self.cfg.redis_nodes)
        ]
        self.redis = RedisCluster(startup_nodes=nodes)
        await self.redis.initialize()
        await self.redis.script_load(RESERVE.source)
        self.producer = Producer(
            {
                "bootstrap.servers": self.cfg.kafka_bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
            }
        )
        self._polling = True
        self._poller = threading.Thread(target=self._poll, name="kafka-delivery", daemon=True)
        self._poller.start()

    async def stop(self) -> None:
        if self.producer is not None:
            await asyncio.to_thread(self.producer.flush, 5.0)
        self._polling = False
        if self._poller is not None:
            self._poller.join(timeout=1)
        if self.redis is not None:
            await self.redis.aclose()

    def _poll(self) -> None:
        while self._polling and self.producer is not None:
            self.producer.poll(0.05)

    async def purchase(self, item_text: str, authorization: str | None) -> tuple[int, bytes]:
        if not item_text.isdigit():
            return 404, b'{"error":"ITEM_NOT_FOUND"}'
        item_id = int(item_text)
        user_id = self._user_id(authorization)
        if user_id is None:
            return 401, b'{"error":"UNAUTHORIZED"}'
        assert self.redis is not None
        home = home_shard(user_id, self.shards)
        order_id = new_order_id(item_id)
        now_ms = int(time.time() * 1000)
        payload = encode(
            OrderPlaced(order_id, item_id, user_id, home, home, now_ms, now_ms + PAYMENT_WINDOW_MS)
        )
        keys = shard_keys(item_id, home)
        try:
            code, value = await asyncio.wait_for(
                self.redis.evalsha(RESERVE.sha, 4, *keys, str(user_id), order_id, payload),
                IO_DEADLINE_S,
            )
        except Exception:  # noqa: BLE001 - any Redis failure is a 503 here
            return 503, b'{"error":"UNAVAILABLE"}'
        if int(code) == 2:
            return 409, b'{"error":"ALREADY_PURCHASED"}'
        if int(code) == 3:
            return 410, b'{"error":"SOLD_OUT"}'
        if not await self._produce(order_id.encode(), payload):
            return 503, b'{"error":"UNAVAILABLE"}'
        return 202, json_encode({"orderId": order_id, "status": "PENDING"})

    def _user_id(self, authorization: str | None) -> int | None:
        if not authorization or not authorization.startswith("Bearer "):
            return None
        try:
            claims = jwt.decode(
                authorization[7:],
                self.cfg.jwt_secret,
                algorithms=["HS256"],
                options={"require": ["exp", "sub"]},
            )
        except jwt.PyJWTError:
            return None
        sub = claims["sub"]
        return int(sub) if isinstance(sub, str) and sub.isdigit() else None

    async def _produce(self, key: bytes, value: bytes) -> bool:
        assert self.producer is not None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()

        def delivered(err: Any, _msg: Any) -> None:
            loop.call_soon_threadsafe(_settle, future, err is None)

        try:
            self.producer.produce(self.cfg.orders_topic, value, key, on_delivery=delivered)
            return await asyncio.wait_for(future, IO_DEADLINE_S)
        except Exception:  # noqa: BLE001 - queue full, timeout: a 503 either way
            return False


def _settle(future: asyncio.Future[bool], ok: bool) -> None:
    if not future.done():
        future.set_result(ok)


def _header(scope: Message, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


gateway = NaiveGateway(settings(), int(os.environ.get("LOADTEST_NAIVE_SHARDS", "8")))


async def app(scope: Message, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    path: str = scope["path"]
    if path.startswith(PREFIX) and path.endswith(SUFFIX) and scope["method"] == "POST":
        status, body = await gateway.purchase(
            path[len(PREFIX) : -len(SUFFIX)], _header(scope, b"authorization")
        )
    elif path == "/readyz":
        status, body = 200, b'{"status":"ready"}'
    else:
        status, body = 404, b'{"error":"NOT_FOUND"}'
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await gateway.start()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await gateway.stop()
            await send({"type": "lifespan.shutdown.complete"})
            return
