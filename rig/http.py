"""The HTTP client sessions of the tests and load tools: kept-alive connections that are never
reused once the gateway may be closing them.

A gateway closes a connection that has not sent the next request head within
``gateway_header_timeout_ms`` (2 s; granian has no separate idle timeout). aiohttp keeps an idle
connection for 15 s by default, so a request sent 2 s after the previous one on the same
connection can meet the close: "Server disconnected" before any answer. With an idle life of
half the server's, a reused connection has at least a second of margin, whatever the load.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from kernel.settings import settings


def keepalive_s() -> float:
    """How long a session keeps an idle connection: half the gateway's idle close."""
    return settings().gateway_header_timeout_ms / 1000 / 2


def client_session(
    base_url: str | None = None, *, limit: int = 100, **kwargs: Any
) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=limit, keepalive_timeout=keepalive_s())
    return aiohttp.ClientSession(base_url, connector=connector, **kwargs)
