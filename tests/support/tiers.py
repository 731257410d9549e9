"""The test tiers, derived from what a test uses rather than from marks someone must remember.

A fixture that starts or reaches a real server is declared with ``server_fixture``; any test
whose fixture closure contains one is marked ``integration`` at collection
(``mark_by_fixtures``), so ``pytest -m "not integration"`` (``make test-fast``) never needs a
server. A test left unmarked that still reaches a server of the stack fails at its first
connect (``refuse_stack_connections``), in every tier: it cannot slip into the fast one.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest

from kernel.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])

SERVER_FIXTURES: set[str] = set()


def server_fixture(*args: Any, **kwargs: Any) -> Callable[[F], F]:
    """``pytest.fixture`` for a fixture that needs a real server: its users are integration."""

    def register(function: F) -> F:
        SERVER_FIXTURES.add(kwargs.get("name") or function.__name__)
        return pytest.fixture(*args, **kwargs)(function)  # type: ignore[no-any-return]

    return register


def mark_by_fixtures(items: Iterable[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & SERVER_FIXTURES and item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.integration)


def stack_addresses(cfg: Settings) -> set[tuple[str, int]]:
    """Every listener of the local stack a test could reach by accident."""
    addresses = [*cfg.redis_nodes, *cfg.kafka_bootstrap.split(","), f"127.0.0.1:{cfg.pg_port}"]
    pairs = set()
    for address in addresses:
        host, port = address.rsplit(":", 1)
        pairs |= {(host, int(port)), ("127.0.0.1", int(port)), ("localhost", int(port))}
    return pairs


class StackUnreachableInThisTier(AssertionError):
    """Raised instead of connecting: the test reaches a server but does not declare it."""


@contextmanager
def refuse_stack_connections(cfg: Settings) -> Iterator[None]:
    """Make every connect to a stack address fail loudly for the duration.

    Patches the socket methods the standard event loop and blocking clients use. (A client
    that connects from C, such as uvloop or librdkafka, is not caught here; those are reached
    only through the gateway and writer processes, which the server fixtures start.)"""
    refused = stack_addresses(cfg)
    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex

    def check(address: Any) -> None:
        if isinstance(address, tuple) and (str(address[0]), int(address[1])) in refused:
            raise StackUnreachableInThisTier(
                f"this test connects to {address[0]}:{address[1]} (the local stack) without a "
                f"server fixture: request `live_stack` (tests/conftest.py) so it is marked "
                f"integration"
            )

    def connect(self: socket.socket, address: Any) -> None:
        check(address)
        original_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(address)
        return original_connect_ex(self, address)

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        socket.socket.connect = original_connect  # type: ignore[method-assign]
        socket.socket.connect_ex = original_connect_ex  # type: ignore[method-assign]
