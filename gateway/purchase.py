"""``POST /api/flash-sales/items/{itemId}/purchase``, as a raw ASGI handler.

The checks run cheapest first, so the 98% who lose are answered before any I/O (the front,
gateway/front.py, has already answered from the sold-out flag or refused an overloaded request):
per-client-address token bucket (so a flood of bad tokens is limited too) → JWT (cached) →
route and item config (cached) → sale window → local SOLD-OUT flag → per-user token bucket →
in-flight cap → one Lua reservation (borrowing if the home shard is empty) → Kafka
acknowledgement → 202.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from gateway import metrics
from gateway.catalog import CatalogUnavailable
from gateway.client_address import ClientAddress
from gateway.errors import (
    ApiError,
    Conflict,
    NotAdmitted,
    NotFound,
    RateLimited,
    SaleNotOpen,
    SoldOut,
    Unavailable,
)
from gateway.items import Item
from gateway.ratelimit import retry_after_seconds
from gateway.responses import SOLD_OUT_BODY, SOLD_OUT_HEADERS, raw_headers, render
from gateway.responses import encode as encode_json
from gateway.services import Services
from gateway.waiting_room.tickets import Signer
from kernel.events import OrderPlaced, encode
from kernel.failpoints import failpoint
from kernel.ids import new_order_id
from kernel.request_context import Headers, kafka_headers, traceparent, valid_request_id
from shard_router import Outcome, ShardUnavailable, home_shard
from shard_router.redis_clock import RedisClock
from shard_router.reserving import UnitMayBeHeld
from shard_router.stock_events import publish

if TYPE_CHECKING:  # the annotation only: with tracing off, OpenTelemetry is never imported
    from kernel.otel import Tracer

log = logging.getLogger(__name__)
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]
_FLAG_HIT = ("sold_out_flag",)
_OUTCOME_BY_ERROR = {
    401: "unauthorized",
    403: "sale_not_open",
    404: "item_not_found",
    409: "already_purchased",
    410: "sold_out",
    429: "rate_limited",
    503: "unavailable",
    400: "bad_request",
}


class PurchaseHandler:
    def __init__(
        self,
        services: Services,
        address: ClientAddress,
        spent: dict[int, int],
        signer: Signer,
        room_clock: RedisClock,
    ) -> None:
        self.s = services
        # A sale's waiting room (gateway/waiting_room/): places up to spent[sale] can no
        # longer buy. Mutated in place, never replaced.
        self._spent = spent
        self._signer = signer
        self._room_clock = room_clock  # the clock the admission's expiry was written by
        self._address = address
        self._ip_buckets = services.ip_buckets
        self._flag_paths = services.flags.by_path  # mutated in place, never replaced
        self._hand_off = services.order_hand_off
        self._outcomes = metrics.PURCHASE_OUTCOMES.counts
        self._tracer = services.tracer  # None: tracing off

    async def __call__(self, scope: dict[str, Any], send: Any, item_text: str) -> None:
        status, headers, body = await self.answer(scope, item_text)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def answered_from_flag(self, path: str) -> bool:
        """Is ``path`` the purchase route of an open item whose sold-out flag is up? The flags'
        path index holds exactly those (see soldout.py), so this is one lookup and one clock
        read; the front then sends the 410."""
        until = self._flag_paths.get(path)
        if until is None or until <= time.monotonic():
            return False
        self._outcomes[_FLAG_HIT] += 1
        return True

    async def answer(self, scope: dict[str, Any], item_text: str) -> Answer:
        try:
            return await self._decide(scope, item_text)
        except ApiError as error:
            _count(_OUTCOME_BY_ERROR.get(error.status, "bad_request"))
            return render(error)

    async def _decide(self, scope: dict[str, Any], item_text: str) -> Answer:
        wait = self._ip_buckets.take(self._address.of(scope), time.monotonic())
        if wait:
            _guard("rate_limit_ip")
            raise RateLimited(retry_after=retry_after_seconds(wait))
        # The token before the item: a request without one never costs a database read.
        user_id = self.s.verifier.user_id(header(scope, b"authorization"))
        item = await self._item(item_text)
        now = time.time()
        if not item.is_open(now):
            raise SaleNotOpen()
        if self.s.flags.is_sold_out(item.id):
            # A guard hit: metrics.py exports this count in both series.
            _count("sold_out_flag")
            return 410, SOLD_OUT_HEADERS, SOLD_OUT_BODY
        if item.waiting_room and not self._signer.admits(
            header(scope, b"x-admission"),
            user_id,
            item.sale_id,
            self._room_clock.now(),
            self._spent.get(item.sale_id, 0),
        ):
            raise NotAdmitted()  # the room is on: only admitted buyers reach the stock
        wait = self.s.user_buckets.take(user_id, time.monotonic())
        if wait:
            _guard("rate_limit_user")
            raise RateLimited(retry_after=retry_after_seconds(wait))
        if self.s.inflight >= self.s.cfg.inflight_cap:
            _guard("inflight_cap")
            raise Unavailable()
        if not self.s.producer.available:
            # Kafka could not acknowledge: a unit taken now would only wait out the produce
            # deadline held. 503 before Redis, so a retry later finds the unit still on sale.
            _guard("kafka_unavailable")
            raise Unavailable()
        self.s.inflight += 1
        try:
            if self._tracer is None:
                return await self._reserve(scope, item, user_id, now)
            return await self._traced(self._tracer, scope, item, user_id, now)
        finally:
            self.s.inflight -= 1

    async def _traced(
        self, tracer: Tracer, scope: dict[str, Any], item: Item, user_id: int, now: float
    ) -> Answer:
        """The reservation in a span whose parent is the request's traceparent; the Kafka
        message carries the span's own on, so the writer's batch span links to it."""
        incoming = header(scope, b"traceparent")
        parent = None if incoming is None else traceparent(incoming)
        with tracer.purchase(parent, item.id) as span:
            try:
                answer = await self._reserve(scope, item, user_id, now, span.traceparent)
            except ApiError as error:
                span.answered(error.status)
                raise
            span.answered(answer[0])
            return answer

    async def _item(self, item_text: str) -> Item:
        if not (item_text.isascii() and item_text.isdigit()) or len(item_text) > 15:
            raise NotFound("ITEM_NOT_FOUND")
        item_id = int(item_text)
        try:
            item = self.s.catalog.cached(item_id) or await self.s.catalog.get(item_id)
        except CatalogUnavailable:
            raise Unavailable() from None
        if item is None:
            raise NotFound("ITEM_NOT_FOUND")
        return item

    async def _reserve(
        self,
        scope: dict[str, Any],
        item: Item,
        user_id: int,
        now: float,
        traced: str | None = None,
    ) -> Answer:
        started = time.perf_counter()
        order_id = new_order_id(item.id)
        created_ms = int(now * 1000)
        expires_ms = created_ms + item.payment_window_s * 1000
        home = home_shard(user_id, item.shards)

        encoded: dict[int, bytes] = {}  # the hand-off sends the bytes the outbox holds

        def payload_for(shard: int) -> bytes:
            payload = encoded.get(shard)
            if payload is None:
                event = OrderPlaced(order_id, item.id, user_id, shard, home, created_ms, expires_ms)
                payload = encoded[shard] = encode(event)
            return payload

        try:
            reservation = await self.s.router.reserve(
                item.id, item.shards, user_id, order_id, payload_for
            )
        except UnitMayBeHeld as exc:
            # The unit may be held under this orderId (and its order on the way to Kafka): the
            # buyer learns it now, not from a retry the sold-out flag may answer first.
            log.warning("reserve of item %s: %s", item.id, exc)
            raise Unavailable(orderId=exc.order_id) from None
        except ShardUnavailable as exc:
            log.warning("reserve of item %s: %s", item.id, exc)
            raise Unavailable() from None
        if reservation.outcome is Outcome.SOLD_OUT:
            await self._sold_out(item.id)
            raise SoldOut()
        if reservation.outcome is Outcome.ALREADY:
            raise Conflict("ALREADY_PURCHASED", orderId=reservation.order_id)
        failpoint("gateway.after_reserve")
        unit_shard = reservation.unit_shard
        await self._hand_off.send(
            (item.id, unit_shard),
            order_id,
            payload_for(unit_shard),
            (item.shards, user_id),
            self._context(scope, order_id, traced),
        )
        metrics.RESERVATION_SECONDS.observe(time.perf_counter() - started)
        _count("accepted")
        body = encode_json({"orderId": order_id, "status": "PENDING"})
        return 202, raw_headers(body), body

    def _context(self, scope: dict[str, Any], order_id: str, traced: str | None) -> Headers:
        """The Kafka headers that carry this order's request id and trace context: a trusted
        proxy's X-Request-Id, else the orderId (kernel/request_context.py); the purchase
        span's traceparent when tracing is on (``traced``), else a valid incoming one, passed
        on; a malformed one of either is ignored. Only a 202 gets here."""
        request_id = order_id
        parent = traced
        for name, value in scope["headers"]:
            if name == b"traceparent":
                if traced is None:
                    parent = traceparent(value.decode("latin-1"))
            elif name == b"x-request-id" and self._address.trusts_peer(scope):
                text = value.decode("latin-1")
                if valid_request_id(text):
                    request_id = text
        return kafka_headers(request_id, parent)

    async def _sold_out(self, item_id: int) -> None:
        if not self.s.flags.is_sold_out(item_id):
            self.s.flags.mark(item_id)
            await publish(self.s.router.client, "soldout", item_id)


def _count(outcome: str) -> None:
    metrics.PURCHASE_OUTCOMES.counts[(outcome,)] += 1


def _guard(guard: str) -> None:
    metrics.PURCHASE_GUARDS.counts[(guard,)] += 1


def header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None
