"""gateway/observed.py around a stand-in front, no stack: requests are timed and counted by
route and status, the sold-out flag's 410 is not, an app that raises counts as a 500, and the
page exports it all as Prometheus histograms and counters."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gateway.observed import PURCHASE_ROUTE, UNMATCHED, Observed, RouteStats

PURCHASE = "/api/flash-sales/items/7/purchase"


class Front:
    """Answers ``status``, or raises; a flag index like the purchase handler's."""

    def __init__(self, status: int = 202, flagged: tuple[str, ...] = ()) -> None:
        self.status = status
        until = time.monotonic() + 60
        flags = SimpleNamespace(by_path=dict.fromkeys(flagged, until))
        self.purchase = SimpleNamespace(s=SimpleNamespace(flags=flags))
        self.calls = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.calls += 1
        if scope["type"] == "lifespan":
            return
        if scope["path"] == "/boom":
            raise RuntimeError("boom")
        if scope["path"] == "/admin/sales":
            scope["route"] = SimpleNamespace(path="/admin/sales")  # as Starlette's router does
        await send({"type": "http.response.start", "status": self.status, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def _call(app: Observed, path: str, method: str = "POST") -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "path": path, "method": method}, None, send)
    return sent


async def test_requests_are_counted_by_route_and_status_but_the_flags_410_is_not() -> None:
    stats = RouteStats()
    front = Front(202, flagged=("/api/flash-sales/items/8/purchase",))
    app = Observed(front, stats)  # type: ignore[arg-type]
    assert (await _call(app, PURCHASE))[0]["status"] == 202
    await _call(app, "/admin/sales")
    await _call(app, "/nowhere", "GET")
    await _call(app, "/api/flash-sales/items/8/purchase")  # flagged: the front's own answer
    assert front.calls == 4
    assert dict(stats.answers) == {
        (PURCHASE_ROUTE, 202): 1,
        ("/admin/sales", 202): 1,
        (UNMATCHED, 202): 1,
    }


async def test_an_app_that_raises_counts_as_a_500_and_still_raises() -> None:
    stats = RouteStats()
    with pytest.raises(RuntimeError):
        await _call(Observed(Front(), stats), "/boom")  # type: ignore[arg-type]
    assert dict(stats.answers) == {(UNMATCHED, 500): 1}


async def test_lifespan_passes_through_untimed() -> None:
    stats, front = RouteStats(), Front()
    app = Observed(front, stats)  # type: ignore[arg-type]
    await app({"type": "lifespan"}, None, None)
    assert front.calls == 1 and not stats.answers


def test_the_page_has_histograms_and_counters_by_route() -> None:
    stats = RouteStats(buckets=(0.01, 0.1))
    stats.observe(PURCHASE_ROUTE, 202, 0.005)
    stats.observe(PURCHASE_ROUTE, 503, 0.05)
    registry = CollectorRegistry()
    registry.register(stats)
    page = generate_latest(registry).decode()
    route = f'route="{PURCHASE_ROUTE}"'
    assert f'flashsale_http_request_seconds_bucket{{le="0.01",{route}}} 1.0' in page
    assert f'flashsale_http_request_seconds_bucket{{le="+Inf",{route}}} 2.0' in page
    assert f"flashsale_http_request_seconds_count{{{route}}} 2.0" in page
    assert f'flashsale_http_responses_total{{code="503",{route}}} 1.0' in page
