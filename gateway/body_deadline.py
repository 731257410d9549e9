"""A request body must arrive whole within a deadline: a client that trickles one (slow-body)
gets 408 and its connection closed (granian closes a connection whose body was not read)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.errors import RequestTimeout

Receive = Callable[[], Awaitable[dict[str, Any]]]


def with_deadline(receive: Receive, seconds: float) -> Receive:
    """``receive``, failing with RequestTimeout once ``seconds`` have passed since this call."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds

    async def timed() -> dict[str, Any]:
        try:
            async with asyncio.timeout_at(deadline):
                return await receive()
        except TimeoutError:
            raise RequestTimeout() from None

    return timed
