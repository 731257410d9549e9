"""The floor for the sold-out path: an ASGI callable with no framework that answers every
request ``410 {"error":"SOLD_OUT"}``, the same bytes and headers the gateway sends from its flag.

Run: ``granian --interface asgi --loop uvloop --workers 1 loadtest.baselines.bare_asgi:app``
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

Message = dict[str, Any]

BODY = b'{"error":"SOLD_OUT"}'
START: Message = {
    "type": "http.response.start",
    "status": 410,
    "headers": [(b"content-type", b"application/json"), (b"content-length", b"20")],
}
RESPONSE_BODY: Message = {"type": "http.response.body", "body": BODY}


async def app(
    scope: Message,
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send(START)
    await send(RESPONSE_BODY)
