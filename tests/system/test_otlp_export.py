"""Tracing end to end, to a real collector: a gateway and a writer export over OTLP/HTTP
(FLASHSALE_OTEL_EXPORTER=otlp, the SDK's OTEL_EXPORTER_OTLP_ENDPOINT) to Jaeger, and one purchase
comes back out of Jaeger's query API as the gateway's span in the buyer's trace and the writer's
batch span linked to it, through the traceparent the Kafka message carried."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from flashsale.stack.processes import settings_env
from gateway.auth import sign_token
from kernel.settings import Settings
from rig.http import client_session
from rig.ports import free_port
from rig.sale import LIFTED_IP_LIMITS, running_writer
from rig.waiting import until
from tests.support.gateway import new_sale, running_gateway
from tests.support.jaeger import Jaeger, running_jaeger
from tests.support.writer import Topics, topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PURCHASE_SPAN = "POST /api/flash-sales/items/{itemId}/purchase"
EXPORT_TIMEOUT_S = 60.0


@pytest.fixture
async def scratch(live_stack: Settings) -> AsyncIterator[Topics]:
    async with topics(live_stack) as made:
        yield made


def _exporting(jaeger: Jaeger) -> dict[str, str]:
    # Batches leave every 100 ms instead of the SDK's 5 s, so the wait below is short.
    return {
        "FLASHSALE_OTEL_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }


async def _buy(cfg: Settings, base: str, item_id: int, traceparent: str) -> None:
    headers = {
        "Authorization": f"Bearer {sign_token(cfg, uuid.uuid4().int % 10**12)}",
        "traceparent": traceparent,
    }
    async with (
        client_session(base) as session,
        session.post(f"/api/flash-sales/items/{item_id}/purchase", headers=headers) as response,
    ):
        body = await response.json()
    assert response.status == 202, body


def _tag(span: dict[str, Any], key: str) -> object:
    return {tag["key"]: tag["value"] for tag in span["tags"]}.get(key)


async def test_a_purchase_reaches_jaeger_as_the_gateway_s_span_and_the_writer_s_linked_batch(
    live_stack: Settings, scratch: Topics, tmp_path: Path
) -> None:
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    common = {
        "FLASHSALE_ORDERS_TOPIC": scratch.orders,
        "FLASHSALE_DEADLETTER_TOPIC": scratch.deadletter,
    }
    with running_jaeger(tmp_path) as jaeger:
        writer_env = {
            **common,
            **_exporting(jaeger),
            "FLASHSALE_WRITER_GROUP": scratch.cfg.writer_group,
            "FLASHSALE_WRITER_STREAMS": "orders",
        }
        gateway_env = {**settings_env(**LIFTED_IP_LIMITS), **common, **_exporting(jaeger)}
        with (
            running_writer(writer_env, log=tmp_path / "writer.log"),
            running_gateway(
                live_stack, free_port(), log=tmp_path / "gateway.log", **gateway_env
            ) as base,
        ):
            item_id = new_sale(base, 5, 4)["items"][0]["itemId"]
            await _buy(live_stack, base, item_id, f"00-{trace_id}-{caller_span}-01")

            # The gateway's span, in the buyer's trace, a child of the buyer's span.
            purchase: list[dict[str, Any]] = []

            def gateway_span_stored() -> bool:
                purchase[:] = [
                    s for s in jaeger.trace(trace_id) if s["operationName"] == PURCHASE_SPAN
                ]
                return bool(purchase)

            await until(gateway_span_stored, EXPORT_TIMEOUT_S, "the gateway's span in Jaeger")
            [span] = purchase
            assert span["serviceName"] == "flashsale-gateway"
            assert span["references"] == [
                {"refType": "CHILD_OF", "traceID": trace_id, "spanID": caller_span}
            ]
            assert _tag(span, "flashsale.item_id") == item_id
            assert _tag(span, "http.response.status_code") == 202

            # The writer's batch span (the scratch topic's only one: one purchase, one batch): a
            # trace of its own, linked to the gateway's span, whose ids only the Kafka message's
            # traceparent header could have brought it. Jaeger shows a link as FOLLOWS_FROM.
            batches: list[dict[str, Any]] = []

            def writer_span_stored() -> bool:
                batches[:] = jaeger.spans("flashsale-writer", f"process {scratch.orders}")
                return bool(batches)

            await until(writer_span_stored, EXPORT_TIMEOUT_S, "the writer's span in Jaeger")
            [batch] = batches
            assert batch["traceID"] != trace_id
            assert batch["references"] == [
                {"refType": "FOLLOWS_FROM", "traceID": trace_id, "spanID": span["spanID"]}
            ]
            assert _tag(batch, "messaging.destination.name") == scratch.orders
            assert _tag(batch, "messaging.batch.message_count") == 1
