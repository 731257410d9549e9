"""The backend fixture of the balancer's tests (test_edge.py, test_edge_buckets.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.deploy.backend import Backend


@pytest.fixture
def backend() -> Iterator[Backend]:
    server = Backend()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
