"""What the front lets past admission when admission refuses everything: the probes and the
operator's routes, never a buyer's (gateway/paths.py's ``ungated``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.admission import Admission
from gateway.front import FlashSaleApp

TARGET_S, INTERVAL_S = 0.25, 0.5


class Inner:
    """Starlette's place: records which paths reached it and answers 200."""

    def __init__(self) -> None:
        self.reached: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def _status(app: FlashSaleApp, method: str, path: str) -> int:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": []}
    await app(scope, receive, send)
    return int(sent[0]["status"])


@pytest.mark.parametrize(
    ("method", "path", "through"),
    [
        ("GET", "/healthz", True),
        ("GET", "/metrics", True),
        ("POST", "/admin/sales", True),
        ("POST", "/admin/items/7/pause", True),
        ("GET", "/api/flash-sales/orders/abc", False),
        ("POST", "/vouchers/CODE/reservations", False),
        ("GET", "/administrator", False),
    ],
)
async def test_a_full_gateway_still_serves_probes_and_the_operator(
    method: str, path: str, through: bool
) -> None:
    gate = Admission(TARGET_S, INTERVAL_S, min_in_flight=1)
    assert gate.admit()  # the one request the cap allows, still in flight
    app = FlashSaleApp(gate, body_timeout_s=1.0)
    app.inner = Inner()  # type: ignore[assignment]
    status = await asyncio.wait_for(_status(app, method, path), 5)
    assert status == (200 if through else 503)
    assert gate.in_flight == 1  # an ungated request is not counted against the cap
