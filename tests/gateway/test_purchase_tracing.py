"""The purchase span in the gateway (kernel/otel.py): the real PurchaseHandler with its
services faked (no stack), and the SDK's in-memory exporter. Tracing on: the span's parent is
the request's traceparent and the Kafka headers carry the span's own; off: the incoming one is
passed on as it came, and no span exists to be made."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.client_address import ClientAddress
from gateway.items import Item
from gateway.purchase import PurchaseHandler
from gateway.services import Services
from gateway.waiting_room.tickets import Signer
from kernel.otel import Tracer
from kernel.request_context import Headers
from kernel.settings import Settings
from shard_router import Outcome
from shard_router.redis_clock import RedisClock
from shard_router.reserving import Reservation

INCOMING = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
ITEM = Item(12, 3, 1, 10, 100, False, 0.0, 4e9, 600, True)


class _Open:
    """Every guard lets the buyer through."""

    by_path: dict[str, float] = {}  # noqa: RUF012 - read only

    def take(self, key: object, now: float) -> float:
        return 0.0

    def user_id(self, authorization: str | None) -> int:
        return 7

    def cached(self, item_id: int) -> Item | None:
        return ITEM if item_id == ITEM.id else None

    def is_sold_out(self, item_id: int) -> bool:
        return False


class _Router:
    async def reserve(self, item_id: int, shards: int, user_id: int, order_id: str, _: Any) -> Any:
        return Reservation(Outcome.RESERVED, order_id, unit_shard=0)


@dataclass
class _HandOff:
    sent: list[Headers | None] = field(default_factory=list)

    async def send(self, place: Any, order_id: str, payload: bytes, _: Any, headers: Any) -> None:
        self.sent.append(headers)


@dataclass
class _Producer:
    available: bool = True


def _handler(cfg: Settings, tracer: Tracer | None) -> tuple[PurchaseHandler, _HandOff]:
    open_ = _Open()
    hand_off = _HandOff()
    services = Services(
        cfg=cfg,
        pool=cast(Any, None),
        catalog=cast(Any, open_),
        router=cast(Any, _Router()),
        producer=cast(Any, _Producer()),
        order_hand_off=cast(Any, hand_off),
        flags=cast(Any, open_),
        verifier=cast(Any, open_),
        user_buckets=cast(Any, open_),
        ip_buckets=cast(Any, open_),
        vouchers=cast(Any, None),
        voucher_store=cast(Any, None),
        voucher_hand_off=cast(Any, None),
        voucher_flags=cast(Any, None),
        tracer=tracer,
    )
    signer = cast(Signer, None)  # the item has no waiting room
    return PurchaseHandler(services, ClientAddress(()), {}, signer, RedisClock()), hand_off


def _buy(handler: PurchaseHandler, *headers: tuple[bytes, bytes]) -> int:
    scope = {"type": "http", "headers": list(headers), "client": ("127.0.0.1", 40000)}
    status, _, _ = asyncio.run(handler.answer(scope, str(ITEM.id)))
    return status


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def test_on_the_purchase_span_continues_the_request_s_trace_into_kafka(
    cfg: Settings, spans: InMemorySpanExporter
) -> None:
    handler, hand_off = _handler(cfg, Tracer(SimpleSpanProcessor(spans), "flashsale-gateway"))
    assert _buy(handler, (b"traceparent", INCOMING.encode())) == 202
    (span,) = spans.get_finished_spans()
    assert span.parent is not None and span.parent.span_id == int("b7ad6b7169203331", 16)
    assert span.attributes is not None
    assert span.attributes["http.response.status_code"] == 202
    assert span.attributes["flashsale.item_id"] == ITEM.id
    (headers,) = hand_off.sent
    carried = dict(headers or [])
    own = f"00-0af7651916cd43dd8448eb211c80319c-{span.context.span_id:016x}-01"
    assert carried["traceparent"] == own.encode()  # the writer's batch span links to this one


def test_on_a_request_without_a_traceparent_starts_the_trace(
    cfg: Settings, spans: InMemorySpanExporter
) -> None:
    handler, hand_off = _handler(cfg, Tracer(SimpleSpanProcessor(spans), "flashsale-gateway"))
    assert _buy(handler, (b"traceparent", b"not-a-traceparent")) == 202  # ignored, never a 400
    (span,) = spans.get_finished_spans()
    assert span.parent is None
    own = span.context
    carried = dict(hand_off.sent[0] or [])["traceparent"]
    assert carried == f"00-{own.trace_id:032x}-{own.span_id:016x}-{own.trace_flags:02x}".encode()


def test_off_the_incoming_traceparent_is_passed_on_as_it_came(cfg: Settings) -> None:
    handler, hand_off = _handler(cfg, None)
    assert _buy(handler, (b"traceparent", INCOMING.encode())) == 202
    assert dict(hand_off.sent[0] or [])["traceparent"] == INCOMING.encode()
    assert _buy(handler) == 202
    assert "traceparent" not in dict(hand_off.sent[1] or [])
