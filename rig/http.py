"""The HTTP client sessions of the tests and load tools: kept-alive connections that are never
reused once the gateway may be closing them.

A gateway closes a connection that has not sent the next request head within
``gateway_header_timeout_ms`` (2 s; granian has no separate idle timeout), the balancer one idle
for ``edge_keepalive_ms`` (1 s). aiohttp keeps an idle connection for 15 s by default, so a
request sent after that on the same connection can meet the close: "Server disconnected" before
any answer. With an idle life of half the shorter of the two, a reused connection has a margin of
as much again, whatever the load (a starved client checks a connection's age late).
"""

from __future__ import annotations

from typing import Any

import aiohttp

from kernel.settings import settings


def keepalive_s() -> float:
    """How long a session keeps an idle connection: half the shortest idle close on its path
    (a gateway's, or the balancer's in front of it)."""
    cfg = settings()
    return min(cfg.gateway_header_timeout_ms, cfg.edge_keepalive_ms) / 1000 / 2


def client_session(
    base_url: str | None = None, *, limit: int = 100, **kwargs: Any
) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=limit, keepalive_timeout=keepalive_s())
    return aiohttp.ClientSession(base_url, connector=connector, **kwargs)
