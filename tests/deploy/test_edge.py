"""The balancer as the edge (docs/fleet.md), with a real haproxy rendered by
flashsale/fleet/haproxy.py in front of a backend that answers when the test lets it: its
overload 503 is the gateway's admission refusal byte for byte, and silent, slowloris and idle
connections are cut by haproxy within its timeouts while a buyer is still answered."""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from flashsale.fleet import haproxy
from flashsale.fleet.haproxy import Balancer, Edge
from gateway.admission import OVERLOADED
from gateway.responses import render
from kernel.settings import Settings, settings
from rig.ports import free_port
from rig.pressure import CpuPressure, bound_kept
from rig.waiting import wait_until
from tests.deploy.backend import Backend

pytestmark = [pytest.mark.slow]

HEAD_TIMEOUT_S = Settings().edge_request_timeout_ms / 1000  # timeout http-request
KEEPALIVE_S = 1.0  # its timeout http-keep-alive
SLACK_S = 1.0  # haproxy's timer wheel and a shared 2-core box


@dataclass
class Edged:
    backend: Backend
    balancer: Balancer


def _edge(backend: Backend, tmp_path: Path, edge: Edge | None) -> Iterator[Edged]:
    if not shutil.which("haproxy"):
        pytest.fail("haproxy is missing: scripts/bootstrap installs it")
    log = tmp_path / "haproxy.log"
    with haproxy.serving(backend.address, free_port(), tmp_path, edge, log=log) as balancer:
        yield Edged(backend, balancer)


@pytest.fixture
def tight(backend: Backend, tmp_path: Path) -> Iterator[Edged]:
    """One request at a time to the backend, one may queue (300 ms), the next is refused."""
    yield from _edge(backend, tmp_path, Edge(1, 1, 300, 1000))


@pytest.fixture
def production(backend: Backend, tmp_path: Path) -> Iterator[Edged]:
    """The edge as the shipped Settings configure it (not this run's environment: a light
    worker's balancers get patient head timeouts, tests/support/workers.py)."""
    yield from _edge(backend, tmp_path, Edge.of(Settings()))


def _post(base: str) -> tuple[httpx.Response, float]:
    with httpx.Client(base_url=base, timeout=10) as client:  # its setup outside the clock
        started = time.monotonic()
        answer = client.post("/api/flash-sales/items/1/purchase")
        return answer, time.monotonic() - started


def _is_the_gateways_refusal(answer: httpx.Response) -> None:
    """The gateway's admission refusal (gateway/admission.py's messages are this render)."""
    status, headers, body = render(OVERLOADED)
    assert answer.status_code == status == 503
    assert answer.content == body
    for name, value in headers:
        assert answer.headers[name.decode()] == value.decode(), name


def test_overload_is_refused_like_the_gateway_refuses_it(tight: Edged) -> None:
    base = tight.balancer.base
    with ThreadPoolExecutor(2) as pool:
        held: Future[tuple[httpx.Response, float]] = pool.submit(_post, base)
        assert tight.backend.started.acquire(timeout=5), "the first request never reached it"
        queued = pool.submit(_post, base)
        # Waiting in haproxy's queue (the backend holds its only slot), as haproxy says: a
        # fixed sleep let a starved client send the next one first.
        assert wait_until(lambda: haproxy.queued(tight.balancer.socket) == 1, 5, 0.01)
        pressure = CpuPressure()
        refused, took = _post(base)  # the queue is full: refused at once, not queued
        _is_the_gateways_refusal(refused)
        bound_kept(
            took < 0.1, f"the full-queue refusal took {took * 1000:.0f} ms", pressure.share()
        )
        timed_out, waited = queued.result(timeout=5)  # its 300 ms in the queue ran out
        _is_the_gateways_refusal(timed_out)
        assert 0.25 <= waited < 0.3 + SLACK_S, waited
        tight.backend.release.set()
        first, _ = held.result(timeout=5)
    assert first.status_code == 202  # admitted work is never dropped
    assert not tight.backend.started.acquire(timeout=0.2), "a refused request reached it"


def _closed_after(conn: socket.socket, drip: bytes = b"", every_s: float = 0.25) -> float:
    """Seconds until the server closes ``conn`` (after any answer it sends), dripping ``drip``
    a byte every ``every_s`` meanwhile."""
    started = time.monotonic()
    conn.settimeout(every_s)
    sent = 0
    while time.monotonic() - started < HEAD_TIMEOUT_S + 5:
        if sent < len(drip):
            conn.sendall(drip[sent : sent + 1])
            sent += 1
        try:
            if not conn.recv(4096):
                return time.monotonic() - started
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - started
    raise AssertionError("never closed")


def _connect(balancer: Balancer) -> socket.socket:
    port = int(balancer.base.rsplit(":", 1)[1])
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def test_a_silent_connection_is_cut_by_the_balancer(production: Edged) -> None:
    with _connect(production.balancer) as conn:
        lived = _closed_after(conn)
    assert HEAD_TIMEOUT_S - 0.2 <= lived < HEAD_TIMEOUT_S + SLACK_S, lived


def test_a_slowloris_head_is_cut_by_the_balancer(production: Edged) -> None:
    # One byte every 250 ms: a timer restarted by each byte would never fire.
    head = b"POST /api/flash-sales/items/1/purchase HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 64
    with _connect(production.balancer) as conn:
        lived = _closed_after(conn, head)
    assert HEAD_TIMEOUT_S - 0.2 <= lived < HEAD_TIMEOUT_S + SLACK_S, lived


def test_a_slow_body_is_cut_by_the_balancer_and_never_reaches_a_gateway(
    production: Edged,
) -> None:
    """A gateway is given a few requests at once (maxconn): a trickled body must not take one."""
    head = b"POST /api/flash-sales/items/1/purchase HTTP/1.1\r\nHost: x\r\n"
    head += b"Content-Length: 64\r\n\r\n"
    with _connect(production.balancer) as conn:
        conn.sendall(head)
        lived = _closed_after(conn, b"{" * 64)
    assert HEAD_TIMEOUT_S - 0.2 <= lived < HEAD_TIMEOUT_S + SLACK_S, lived
    assert not production.backend.started.acquire(timeout=0.2), "the slow body reached it"


def test_an_idle_keep_alive_connection_is_cut_by_the_balancer(production: Edged) -> None:
    with _connect(production.balancer) as conn:
        # A buyer route: the public listener forwards only those (edge_public_prefixes).
        conn.sendall(b"GET /api/flash-sales/orders/x HTTP/1.1\r\nHost: x\r\n\r\n")
        conn.settimeout(5)
        assert conn.recv(4096).startswith(b"HTTP/1.1 200")
        lived = _closed_after(conn)
    assert KEEPALIVE_S - 0.2 <= lived < KEEPALIVE_S + SLACK_S, lived


def test_a_buyer_is_answered_past_silent_sockets(production: Edged) -> None:
    """More silent sockets than a default granian worker's connection permits (4,096)."""
    assert settings().edge_maxconn > 4500
    production.backend.release.set()
    held = [_connect(production.balancer) for _ in range(4500)]
    try:
        answer, took = _post(production.balancer.base)
        assert answer.status_code == 202
        assert took < 1.0, took
    finally:
        for conn in held:
            conn.close()
