"""One purchase followed from the gateway through Kafka to the writer: the request id (a trusted
proxy's X-Request-Id, else the orderId) and the W3C traceparent ride the Kafka message's headers
into the writer's JSON log line for that order and into a dead-letter record."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from flashsale.stack.processes import settings_env
from gateway.auth import sign_token
from kernel.settings import Settings
from rig.http import client_session
from rig.ports import free_port
from rig.sale import LIFTED_IP_LIMITS, running_writer
from rig.waiting import until
from tests.support.gateway import new_sale, running_gateway
from tests.support.writer import PARTITIONS, Topics, drain, read_all, topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture
async def scratch(live_stack: Settings) -> AsyncIterator[Topics]:
    async with topics(live_stack) as made:
        yield made


@contextmanager
def _pipeline(cfg: Settings, t: Topics, logs: Path, trusted: str) -> Iterator[str]:
    """A writer (JSON logs at debug) and a gateway (JSON logs) on the scratch topics."""
    common = {
        "FLASHSALE_ORDERS_TOPIC": t.orders,
        "FLASHSALE_DEADLETTER_TOPIC": t.deadletter,
        "FLASHSALE_LOG_FORMAT": "json",
    }
    writer_env = {
        **common,
        "FLASHSALE_WRITER_GROUP": t.cfg.writer_group,
        "FLASHSALE_WRITER_STREAMS": "orders",
        "FLASHSALE_LOG_LEVEL": "debug",
    }
    gateway_env = {**settings_env(**LIFTED_IP_LIMITS), **common}
    gateway_env["FLASHSALE_TRUSTED_PROXIES"] = trusted
    with (
        running_writer(writer_env, log=logs / "writer.log"),
        running_gateway(cfg, free_port(), log=logs / "gateway.log", **gateway_env) as base,
    ):
        yield base


async def _buy(cfg: Settings, base: str, item_id: int, headers: dict[str, str]) -> str:
    auth = {"Authorization": f"Bearer {sign_token(cfg, uuid.uuid4().int % 10**12)}"}
    async with (
        client_session(base) as session,
        session.post(
            f"/api/flash-sales/items/{item_id}/purchase", headers={**auth, **headers}
        ) as response,
    ):
        body = await response.json()
    assert response.status == 202, body
    order_id: str = body["orderId"]
    return order_id


def _kafka_headers(cfg: Settings, topic: str, key: str, timeout_s: float = 20) -> dict[str, str]:
    """The headers of the message keyed ``key`` on ``topic``."""
    consumer = Consumer(
        {
            "bootstrap.servers": cfg.kafka_bootstrap,
            "group.id": f"test-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None and msg.key() == key.encode():
                found = msg.headers()
                assert isinstance(found, list)
                return {n: v if isinstance(v, str) else (v or b"").decode() for n, v in found}
    finally:
        consumer.close()
    raise AssertionError(f"no message keyed {key} on {topic}")


async def _log_line(path: Path, order_id: str) -> dict[str, Any]:
    """The writer's JSON log line for ``order_id`` (every line must be JSON)."""
    found: list[dict[str, Any]] = []

    def look() -> bool:
        lines = [msgspec.json.decode(x) for x in path.read_text().splitlines() if x.strip()]
        found[:] = [x for x in lines if x.get("order_id") == order_id]
        return bool(found)

    await until(look, 60, f"the writer's log line for {order_id}")
    [line] = found
    return line


def _all_json(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines()
    assert lines, path
    return [msgspec.json.decode(line) for line in lines]  # each line one object, or this raises


async def test_a_trusted_proxys_request_id_reaches_kafka_and_the_writer(
    live_stack: Settings, scratch: Topics, tmp_path: Path
) -> None:
    with _pipeline(live_stack, scratch, tmp_path, trusted="127.0.0.1/32") as base:
        item_id = new_sale(base, 5, 4)["items"][0]["itemId"]
        request_id = f"edge-{uuid.uuid4().hex}"
        headers = {"X-Request-Id": request_id, "traceparent": _TRACEPARENT}
        order_id = await _buy(live_stack, base, item_id, headers)
        carried = await asyncio.to_thread(_kafka_headers, live_stack, scratch.orders, order_id)
        assert carried == {"request-id": request_id, "traceparent": _TRACEPARENT}
        line = await _log_line(tmp_path / "writer.log", order_id)
        assert line["request_id"] == request_id and line["trace_id"] == _TRACE_ID
        assert line["logger"] == "writer.consumer" and "order inserted" in line["msg"]
        # A malformed traceparent is ignored, not an error: the purchase goes through without.
        other = await _buy(live_stack, base, item_id, {"traceparent": _TRACEPARENT.upper()})
        assert await asyncio.to_thread(_kafka_headers, live_stack, scratch.orders, other) == {
            "request-id": other
        }
    gateway_lines = _all_json(tmp_path / "gateway.log")
    assert {x["logger"] for x in gateway_lines} & {"granian", "_granian"}  # granian's own too
    _all_json(tmp_path / "writer.log")


async def test_an_untrusted_request_id_is_replaced(
    live_stack: Settings, scratch: Topics, tmp_path: Path
) -> None:
    # A proxy is trusted, but not this peer: its X-Request-Id is a client's, never read.
    with _pipeline(live_stack, scratch, tmp_path, trusted="10.77.250.0/24") as base:
        item_id = new_sale(base, 5, 4)["items"][0]["itemId"]
        order_id = await _buy(live_stack, base, item_id, {"X-Request-Id": "forged-by-client"})
        carried = await asyncio.to_thread(_kafka_headers, live_stack, scratch.orders, order_id)
        assert carried == {"request-id": order_id}
        line = await _log_line(tmp_path / "writer.log", order_id)
        assert line["request_id"] == order_id and "trace_id" not in line
    assert "forged-by-client" not in (tmp_path / "writer.log").read_text()


def _produce(cfg: Settings, topic: str, key: bytes, value: bytes, headers: Any) -> None:
    producer = Producer({"bootstrap.servers": cfg.kafka_bootstrap, "acks": "all"})
    producer.produce(topic, value, key, partition=0, headers=headers)
    assert producer.flush(30) == 0


async def test_a_dead_letter_names_the_request_id(
    scratch: Topics, caplog: pytest.LogCaptureFixture
) -> None:
    key = str(uuid.uuid4())
    carried = [("request-id", b"edge-42"), ("traceparent", _TRACEPARENT.encode())]
    await asyncio.to_thread(
        _produce, scratch.cfg, scratch.orders, key.encode(), b"not json", carried
    )
    await asyncio.to_thread(_produce, scratch.cfg, scratch.orders, b"k-2", b"also not json", None)
    with caplog.at_level(logging.INFO, logger="writer.consumer"):
        await drain(scratch.cfg)
    letters = {x["payload"]: x for x in await read_all(scratch.cfg, scratch.deadletter, 2)}
    assert letters["not json"]["request_id"] == "edge-42"
    assert letters["not json"]["traceparent"] == _TRACEPARENT
    assert letters["also not json"]["request_id"] == "k-2"  # no header: the key
    assert "traceparent" not in letters["also not json"]
    [logged] = [r for r in caplog.records if getattr(r, "order_id", None) == key]
    assert logged.__dict__["request_id"] == "edge-42" and "edge-42" in logged.getMessage()
