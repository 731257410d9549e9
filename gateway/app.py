"""The composition root: ``build_app`` wires the raw front (gateway/front.py) to a Starlette app
for every other route, and its lifespan starts the process's services and hands the front the
handlers that need them."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.routing import Route

from gateway import admin, openapi, orders, probes, room_admin, voucher_admin, vouchers
from gateway.admission import Admission
from gateway.auth import refuse_dev_secrets
from gateway.client_address import ClientAddress
from gateway.exception_map import EXCEPTION_HANDLERS
from gateway.front import FlashSaleApp
from gateway.purchase import PurchaseHandler
from gateway.ratelimit import RouteLimits
from gateway.services import Services
from gateway.shutdown import Drain
from gateway.waiting_room import frontier, join
from gateway.waiting_room.poll import PollHandler
from gateway.waiting_room.tickets import Signer, room_key
from kernel.settings import Settings, settings


def build_app(cfg: Settings | None = None) -> FlashSaleApp:
    cfg = cfg or settings()
    refuse_dev_secrets(cfg)
    address = ClientAddress(cfg.trusted_proxies)
    front = FlashSaleApp(
        Admission(
            cfg.admission_target_ms / 1000,
            cfg.admission_interval_ms / 1000,
            cfg.admission_budget_ms / 1000,
            cfg.admission_min_in_flight,
        ),
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
        front.purchase = PurchaseHandler(services, address, rooms.spent, rooms.signer, rooms.clock)
        front.room_poll = PollHandler(services, address, app.state.limits, rooms)
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

    # The purchase and a queue's GET (its poll) are the front's own routes, not Starlette's.
    front.inner = Starlette(
        routes=[
            Route("/healthz", probes.healthz),
            Route("/openapi.json", openapi.serve),
            Route("/readyz", probes.readyz),
            Route("/metrics", probes.metrics_endpoint),
            Route("/api/flash-sales/orders/{order_id}", orders.get_order),
            Route("/api/flash-sales/items/{item_id}/order", orders.get_item_order),
            Route("/api/flash-sales/orders/{order_id}/pay", orders.pay_order, methods=["POST"]),
            Route(
                "/api/flash-sales/orders/{order_id}/cancel", orders.cancel_order, methods=["POST"]
            ),
            Route("/api/flash-sales/sales/{sale_id}/queue", join.join, methods=["POST"]),
            Route("/admin/sales", admin.post_sale, methods=["POST"]),
            Route("/admin/sales/{sale_id}/arm", admin.arm, methods=["POST"]),
            Route("/admin/sales/{sale_id}/room", room_admin.room, methods=["GET", "POST"]),
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
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
    return front
