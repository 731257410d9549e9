"""Run the real gateway (granian) as a subprocess for HTTP tests, and helpers to talk to it."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from kernel.settings import PROJECT_ROOT, Settings

ADMIN = {"Authorization": "Bearer dev-admin-token"}


@contextmanager
def running_gateway(cfg: Settings, port: int, **env: str) -> Iterator[str]:
    # Tests share 2 cores with Redis, Kafka, PostgreSQL and the writer: a 250 ms Redis deadline
    # would turn scheduling hiccups into 503s. The deadline itself is tested with a paused node.
    environ = {
        **os.environ,
        "FLASHSALE_GATEWAY_PORT": str(port),
        "FLASHSALE_REDIS_TIMEOUT_MS": "1000",
        **env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway"],
        cwd=PROJECT_ROOT,
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("gateway did not become ready")
            time.sleep(0.1)
        yield base
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def new_sale(
    base: str, quantity: int, shards: int, window_s: int = 600, opens_in_s: int = -5
) -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC)
    body = {
        "name": "test",
        "startsAt": (now + dt.timedelta(seconds=opens_in_s)).isoformat(),
        "endsAt": (now + dt.timedelta(hours=2)).isoformat(),
        "paymentWindowSeconds": window_s,
        "items": [{"productId": "sku", "quantity": quantity, "price": 990, "shards": shards}],
    }
    created = httpx.post(f"{base}/admin/sales", json=body, headers=ADMIN, timeout=10)
    assert created.status_code == 201, created.text
    sale: dict[str, Any] = created.json()
    armed = httpx.post(f"{base}/admin/sales/{sale['saleId']}/arm", headers=ADMIN, timeout=30)
    assert armed.status_code == 200, armed.text
    return sale
