"""A backend the balancer's tests put behind a real haproxy: it answers when the test lets it."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Backend(ThreadingHTTPServer):
    """/readyz answers at once; a POST waits until the test releases it, then answers 202 (or
    the status ``statuses`` holds for its path)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.release = threading.Event()
        self.started = threading.Semaphore(0)  # one per POST the backend got
        self.statuses: dict[str, int] = {}

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # haproxy closing a check's or a released request's connection first

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Backend
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer(b"{}")

    def do_POST(self) -> None:  # noqa: N802
        self.server.started.release()
        self.server.release.wait(10)
        self._answer(b'{"orderId":1,"status":"PENDING"}', self.server.statuses.get(self.path, 202))

    def _answer(self, body: bytes, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass
