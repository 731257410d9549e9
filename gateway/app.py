"""Wires the gateway: a thin ASGI front that serves the purchase route itself (the hot path,
no framework in the way) and hands every other route to a Starlette app.

The front's order: the sold-out flag's 410 (the cheapest answer, and a final one) → admission
(503 OVERLOADED for a request that waited too long or arrives while the loop is behind) → the
purchase handler, or Starlette with a deadline on the request body."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from gateway import admin, metrics, openapi, orders, voucher_admin, vouchers
from gateway.admission import OVERLOADED_BODY, OVERLOADED_START, Admission
from gateway.auth import refuse_dev_secrets
from gateway.body_deadline import with_deadline
from gateway.catalog import CatalogUnavailable
from gateway.client_address import ClientAddress
from gateway.errors import ApiError, Unavailable
from gateway.limits import operations
from gateway.paths import PURCHASE_PREFIX, PURCHASE_SUFFIX
from gateway.purchase import PurchaseHandler
from gateway.ratelimit import RouteLimits
from gateway.responses import SOLD_OUT_BODY, SOLD_OUT_HEADERS, error_response, json_response
from gateway.services import Services
from gateway.shutdown import Drain
from gateway.stock_gauges import STOCK
from gateway.waiting_room import frontier, routes
from gateway.waiting_room.tickets import Signer, room_key
from kernel.settings import Settings, settings

log = logging.getLogger(__name__)
# The flag's answer as ready-made ASGI messages (a server only reads them).
_SOLD_OUT_START = {"type": "http.response.start", "status": 410, "headers": SOLD_OUT_HEADERS}
_SOLD_OUT_BODY = {"type": "http.response.body", "body": SOLD_OUT_BODY}
# Never refused by admission: a probe that failed under load would take a busy process out of
# its load balancer and pile its share onto the others, and a refused scrape would hide the
# overload from Prometheus exactly then. (/readyz and /metrics have their own rate limit.)
_UNGATED = frozenset({"/healthz", "/readyz", "/metrics"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    s = operations(request)
    drain: Drain = request.app.state.drain
    if drain.draining:  # stopping: out of the balancer first (gateway/shutdown.py)
        raise Unavailable("NOT_READY", draining=True)
    redis_ok = True
    try:
        await s.router.ping()
    except Exception:  # noqa: BLE001 - any failure means not ready
        redis_ok = False
    kafka_ok = await s.producer.reachable(1.0)
    if not (redis_ok and kafka_ok):
        raise Unavailable("NOT_READY", redis=redis_ok, kafka=kafka_ok)
    return json_response({"status": "ready", "redis": True, "kafka": True})


async def metrics_endpoint(request: Request) -> Response:
    s = operations(request)
    await STOCK.refresh(s)  # gateway/stock_gauges.py: bounded, whatever the scrape rate
    return PlainTextResponse(
        metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8"
    )


async def api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def dependency_error(request: Request, exc: Exception) -> Response:
    """PostgreSQL (or a socket) failed under a non-purchase route: 503, never a 500 page."""
    log.warning("%s %r: %r", request.method, request.url.path, exc)  # %r: the client wrote it
    return error_response(Unavailable())


async def internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %r", request.method, request.url.path)
    return json_response({"error": "INTERNAL"}, status=500)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "INVALID_REQUEST")
    return json_response({"error": code}, status=exc.status_code)


def build_app(cfg: Settings | None = None) -> FlashSaleApp:
    cfg = cfg or settings()
    refuse_dev_secrets(cfg)
    address = ClientAddress(cfg.trusted_proxies)
    front = FlashSaleApp(
        Admission(cfg.admission_target_ms / 1000, cfg.admission_interval_ms / 1000),
        cfg.body_timeout_ms / 1000,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        services = await Services.start(cfg)
        app.state.services = services
        app.state.drain = drain = Drain(cfg.gateway_drain_delay_ms / 1000)
        drain.install()
        app.state.client_address = address
        app.state.limits = RouteLimits(cfg, services.ip_buckets)
        signer = Signer(room_key(cfg.waiting_room_secret, cfg.admin_token))
        rooms = frontier.WaitingRooms(services, signer)
        app.state.rooms, app.state.signer = rooms, rooms.signer
        services.tasks += [
            asyncio.create_task(rooms.run(services.stop)),
            asyncio.create_task(frontier.listen(rooms, cfg.redis_nodes, services.stop)),
        ]  # stopped and awaited with the others' by services.close()
        front.purchase = PurchaseHandler(services, address, rooms.spent, rooms.signer)
        front.room_poll = routes.PollHandler(services, address, app.state.limits, rooms)
        front.admission.start()
        # A reservation allocates a few dozen tracked objects that die young: at CPython's
        # gen0 threshold of 700, collections cost ~5 µs a reservation (in-process, 20,000
        # orders); at 20,000 ~0.6 µs. What start-up built is frozen: never traversed again.
        gc.collect()
        gc.freeze()
        gc.set_threshold(cfg.gc_gen0_threshold, 10, 10)
        try:
            yield
        finally:
            # granian runs this once every connection is done: what remains is ours to finish.
            front.admission.stop()
            await services.close()

    front.inner = Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/openapi.json", openapi.serve),
            Route("/readyz", readyz),
            Route("/metrics", metrics_endpoint),
            Route("/api/flash-sales/orders/{order_id}", orders.get_order),
            Route("/api/flash-sales/orders/{order_id}/pay", orders.pay_order, methods=["POST"]),
            Route(
                "/api/flash-sales/orders/{order_id}/cancel", orders.cancel_order, methods=["POST"]
            ),
            Route("/api/flash-sales/sales/{sale_id}/queue", routes.join, methods=["POST"]),
            Route("/api/flash-sales/sales/{sale_id}/queue", routes.poll, methods=["GET"]),
            Route("/admin/sales", admin.post_sale, methods=["POST"]),
            Route("/admin/sales/{sale_id}/arm", admin.arm, methods=["POST"]),
            Route("/admin/items/{item_id}", admin.get_item),
            Route("/vouchers/{code}/reservations", vouchers.reserve, methods=["POST"]),
            Route(
                "/vouchers/{code}/reservations/{order_id}/confirm",
                vouchers.confirm_reservation,
                methods=["POST"],
            ),
            Route(
                "/vouchers/{code}/reservations/{order_id}",
                vouchers.release_reservation,
                methods=["DELETE"],
            ),
            Route("/admin/vouchers", voucher_admin.post_voucher, methods=["POST"]),
            Route("/admin/vouchers/{code}", voucher_admin.get_voucher),
            Route("/admin/vouchers/{code}/arm", voucher_admin.arm, methods=["POST"]),
        ],
        exception_handlers={
            ApiError: api_error,
            HTTPException: http_error,
            asyncpg.PostgresError: dependency_error,
            asyncpg.InterfaceError: dependency_error,
            OSError: dependency_error,
            CatalogUnavailable: dependency_error,
            Exception: internal_error,
        },
        lifespan=lifespan,
    )
    return front


class FlashSaleApp:
    inner: Starlette
    purchase: PurchaseHandler | None = None
    room_poll: routes.PollHandler | None = None  # a waiting room's poll (gateway/waiting_room/)

    def __init__(self, admission: Admission, body_timeout_s: float) -> None:
        self.admission = admission
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            purchase = self.purchase
            if (
                purchase is not None
                and scope["method"] == "POST"
                and purchase.answered_from_flag(path)
            ):
                # The 98% who lose: no framework, no coroutine, no token check, no I/O.
                await send(_SOLD_OUT_START)
                await send(_SOLD_OUT_BODY)
                return
            if path not in _UNGATED and not self.admission.admit():
                await send(OVERLOADED_START)
                await send(OVERLOADED_BODY)
                return
            if path.startswith(PURCHASE_PREFIX) and path.endswith(PURCHASE_SUFFIX):
                if scope["method"] != "POST":
                    await self.inner(scope, receive, send)
                    return
                if self.purchase is None:
                    raise RuntimeError("purchase route called before start-up")
                await self.purchase(scope, send, path[len(PURCHASE_PREFIX) : -len(PURCHASE_SUFFIX)])
                return
            if (
                scope["method"] == "GET"
                and path.startswith(routes.QUEUE_PREFIX)
                and path.endswith(routes.QUEUE_SUFFIX)
                and self.room_poll is not None
            ):
                # Polls come every Retry-After from everyone waiting: no framework either.
                await self.room_poll(
                    scope, send, path[len(routes.QUEUE_PREFIX) : -len(routes.QUEUE_SUFFIX)]
                )
                return
            if scope["method"] in _BODY_METHODS:
                receive = with_deadline(receive, self.body_timeout_s)
        await self.inner(scope, receive, send)
