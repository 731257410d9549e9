"""The raw ASGI front: it serves the hot routes itself (no framework in the way) and hands every
other route to the Starlette app.

Its order: the sold-out flag's 410 (the cheapest answer, and a final one) → admission (503
OVERLOADED for a request that waited too long, arrives while a queue stands, or finds the
in-flight cap reached; every admitted request is counted until it is answered) → the
purchase handler, a waiting room's poll, or Starlette with a deadline on the request body."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette

from gateway.admission import OVERLOADED_BODY, OVERLOADED_START, Admission
from gateway.body_deadline import with_deadline
from gateway.errors import MethodNotAllowed
from gateway.paths import PURCHASE_PREFIX, PURCHASE_SUFFIX, QUEUE_PREFIX, QUEUE_SUFFIX, ungated
from gateway.purchase import PurchaseHandler
from gateway.responses import SOLD_OUT_BODY, SOLD_OUT_HEADERS, render
from gateway.waiting_room.poll import PollHandler

# The flag's answer as ready-made ASGI messages (a server only reads them).
_SOLD_OUT_START = {"type": "http.response.start", "status": 410, "headers": SOLD_OUT_HEADERS}
_SOLD_OUT_BODY = {"type": "http.response.body", "body": SOLD_OUT_BODY}
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class FlashSaleApp:
    """The two raw handlers need the services, so the lifespan (gateway/app.py) sets them once
    they have started; a server sends no request before that."""

    inner: Starlette
    purchase: PurchaseHandler | None = None
    room_poll: PollHandler | None = None  # a waiting room's poll (gateway/waiting_room/)

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
            if ungated(path):
                await self._route(scope, receive, send, path)
                return
            if not self.admission.admit():
                await send(OVERLOADED_START)
                await send(OVERLOADED_BODY)
                return
            try:
                await self._route(scope, receive, send, path)
            finally:
                self.admission.answered()
            return
        await self.inner(scope, receive, send)

    async def _route(self, scope: dict[str, Any], receive: Any, send: Any, path: str) -> None:
        """A request past the flag and admission, to its handler."""
        if path.startswith(PURCHASE_PREFIX) and path.endswith(PURCHASE_SUFFIX):
            if scope["method"] != "POST":
                await _not_allowed(send)
                return
            if self.purchase is None:
                raise RuntimeError("purchase route called before start-up")
            await self.purchase(scope, send, path[len(PURCHASE_PREFIX) : -len(PURCHASE_SUFFIX)])
            return
        if (
            scope["method"] == "GET"
            and path.startswith(QUEUE_PREFIX)
            and path.endswith(QUEUE_SUFFIX)
        ):
            if self.room_poll is None:
                raise RuntimeError("queue poll called before start-up")
            # Polls come every Retry-After from everyone waiting: no framework either.
            await self.room_poll(scope, send, path[len(QUEUE_PREFIX) : -len(QUEUE_SUFFIX)])
            return
        if scope["method"] in _BODY_METHODS:
            receive = with_deadline(receive, self.body_timeout_s)
        await self.inner(scope, receive, send)


async def _not_allowed(send: Any) -> None:
    """The purchase route takes only POST: 405 with Allow, as every other route answers."""
    status, headers, body = render(MethodNotAllowed())
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"allow", b"POST")],
        }
    )
    await send({"type": "http.response.body", "body": body})
