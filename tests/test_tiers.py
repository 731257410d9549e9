"""The tiers hold by construction: a test that uses a server fixture is integration, and a test
that is not cannot reach the stack."""

from __future__ import annotations

import socket

import pytest

from kernel.settings import Settings
from tests.support.tiers import (
    SERVER_FIXTURES,
    StackUnreachableInThisTier,
    refuse_stack_connections,
    stack_addresses,
)


def test_the_stack_fixtures_are_declared_as_servers() -> None:
    # The root conftest is imported before any test runs (the others only when their
    # directory is collected).
    assert "live_stack" in SERVER_FIXTURES


def test_a_test_that_uses_the_stack_is_marked_integration(
    request: pytest.FixtureRequest,
) -> None:
    # This test uses no server fixture: it runs in the fast tier, unmarked.
    assert request.node.get_closest_marker("integration") is None
    session_items = request.session.items
    users = [i for i in session_items if "live_stack" in getattr(i, "fixturenames", ())]
    assert all(i.get_closest_marker("integration") is not None for i in users)


def test_an_unmarked_test_cannot_connect_to_the_stack(cfg: Settings) -> None:
    host, port = cfg.redis_nodes[0].rsplit(":", 1)
    with socket.socket() as sock, pytest.raises(StackUnreachableInThisTier, match="live_stack"):
        sock.connect((host, int(port)))
    with socket.socket() as sock, pytest.raises(StackUnreachableInThisTier):
        sock.connect_ex(("127.0.0.1", cfg.pg_port))


def test_other_loopback_ports_stay_reachable(cfg: Settings) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert ("127.0.0.1", port) not in stack_addresses(cfg)
        with refuse_stack_connections(cfg), socket.socket() as client:
            client.connect(("127.0.0.1", port))
