"""The rows' open-loop load ends where recovery is seen (OpenLoad.settle), not at its bound: a
boundary test against a made-up purchase endpoint on loopback that refuses, then sells."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kernel.settings import load_settings
from tests.support.system_load import OpenLoad

RATE = 100.0


class _Refusing(BaseHTTPRequestHandler):
    """Every purchase answers 503 UNAVAILABLE until the server's ``recovered`` is set, then 202
    with an order id."""

    server: _Endpoint

    def do_POST(self) -> None:
        if self.server.recovered.is_set():
            status, body = 202, {"orderId": str(uuid.uuid4())}
        else:
            status, body = 503, {"error": "UNAVAILABLE"}
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: a few hundred requests per test


class _Endpoint(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Refusing)
        self.recovered = threading.Event()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def endpoint() -> Iterator[_Endpoint]:
    server = _Endpoint()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _load(base: str, duration_s: float) -> OpenLoad:
    cfg = load_settings({})
    return OpenLoad(
        cfg, [base], 1, first_buyer=1, rate=RATE, duration_s=duration_s, deadline_s=2
    ).start()


def test_settle_ends_the_load_after_a_window_of_good_answers(
    endpoint: _Endpoint,
) -> None:
    load = _load(endpoint.base, duration_s=30)
    try:
        load.sleep_until(1)
        endpoint.recovered.set()
        recovered_at = load.now()
        settled_at = load.settle(0.5, window_s=1, limit_s=20)
    finally:
        answers = load.result()
    assert settled_at is not None
    # A window of only good answers, so it ends after the recovery; the load stopped sending
    # soon after it (one poll, however starved this machine) instead of running its 30 s.
    assert settled_at > recovered_at
    end = round(settled_at * RATE)  # by buyer index: due times are i / RATE, floats
    window = [a for a in answers if end - RATE <= round(a.due_s * RATE) < end]
    assert len(window) == RATE * 1 and all(a.status == 202 for a in window)
    assert max(a.due_s for a in answers) < 15
    assert any(a.status == 503 for a in answers if a.due_s < recovered_at)


def test_settle_gives_up_at_its_limit_and_the_load_runs_on(
    endpoint: _Endpoint,
) -> None:
    load = _load(endpoint.base, duration_s=3)
    try:
        assert load.settle(0, window_s=0.5, limit_s=1) is None
    finally:
        answers = load.result()
    # Unanswered (0) on a starved machine says nothing about settle; every answer was the 503.
    assert {a.status for a in answers} - {0} == {503}
    assert len(answers) == 3 * RATE  # ran to its duration: every buyer due was sent
