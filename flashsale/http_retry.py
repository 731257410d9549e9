"""The one retry policy of the project's own HTTP clients (the demo, the Locust scenarios, the
load generators): an idempotent request whose connection failed before an answer is sent again,
a few times, with jittered exponential waits (stamina), and nothing else is retried — an HTTP
answer, a 503 included, is the caller's to judge.

Why: a server closes an idle kept-alive connection (granian after
``gateway_header_timeout_ms``, haproxy after ``timeout http-keep-alive``) at the moment a client
reuses it. The client then sees the close while writing ("Cannot write to closing transport"),
or while reading ("Server disconnected", a reset): the request never reached the application, or
its answer was lost. Both are connection-level, both are safe to resend for these requests.

Safe: every request these clients make is idempotent. A purchase is keyed by (item, buyer): the
Lua script takes a unit only when the buyer holds none, so a resend that follows a purchase that
did go through answers 409 ALREADY_PURCHASED with the same orderId, never a second unit. A queue
join returns the buyer's one ticket again; polls, order reads and admin reads change nothing.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from typing import Any

import aiohttp
import stamina

# Bounded in attempts and in time, jittered so a crowd that lost its connections together does
# not come back in one instant.
ATTEMPTS = 4
TIMEOUT_S = 10.0
WAIT_INITIAL_S = 0.02
WAIT_MAX_S = 0.5
WAIT_JITTER_S = 0.05
_POLICY: dict[str, Any] = {
    "attempts": ATTEMPTS,
    "timeout": TIMEOUT_S,
    "wait_initial": WAIT_INITIAL_S,
    "wait_max": WAIT_MAX_S,
    "wait_jitter": WAIT_JITTER_S,
}

# Connection-level failures of asyncio clients: aiohttp's (closing transport, server
# disconnected, reset, refused) and the OS's. Timeouts are not among them: a request that hung
# may still be running, and the scenarios that study that resend it themselves.
CONNECTION_FAILURES: tuple[type[Exception], ...] = (
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientOSError,
    ConnectionError,
)
# What a raw socket reports when the peer closed the connection under a request.
LOST_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED})


class ConnectionLost(Exception):
    """Raised by a caller whose client reports a lost connection as a value (Locust's
    status 0) rather than an exception, so the same policy retries it."""


def attempts(on: tuple[type[Exception], ...] = CONNECTION_FAILURES) -> Iterator[Any]:
    """``for attempt in attempts(): with attempt: ...``: the block again while it raises one of
    ``on``; the last failure is raised once the budget is spent."""
    return iter(stamina.retry_context(on=on, **_POLICY))


async def answer(
    session: aiohttp.ClientSession, method: str, path: str, headers: dict[str, str]
) -> tuple[int, bytes, str]:
    """(status, body, Retry-After or "") of one idempotent request, resent after a lost
    connection."""
    async for attempt in stamina.retry_context(on=CONNECTION_FAILURES, **_POLICY):
        with attempt:
            async with session.request(method, path, headers=headers) as response:
                body = await response.read()
                return response.status, body, response.headers.get("retry-after", "")
    raise AssertionError("unreachable: stamina raises the last failure")
