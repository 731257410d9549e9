"""Run the real gateway (granian) as a subprocess for HTTP tests, and helpers to talk to it."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from flashsale.stack.processes import http_ready, process_group, settings_env, wait_ready
from kernel.settings import Settings, settings
from tests.support.constants import DRAIN_MS, REDIS_TIMEOUT_MS

ADMIN = {"Authorization": f"Bearer {settings().admin_token}"}
SERVICE = {"Authorization": f"Bearer {settings().service_token}"}
READY_TIMEOUT_S = 30.0


@contextmanager
def running_gateway(
    cfg: Settings, port: int, *, log: Path | str | None = None, **env: str
) -> Iterator[str]:
    """A gateway on ``port`` for the block; ``env`` (``FLASHSALE_*`` names, see
    ``settings_env``, so never ``log``) on top of the tests' defaults; its output appended to
    the file ``log`` if given. Yields its base URL."""
    environ = {
        **settings_env(
            gateway_port=port, redis_timeout_ms=REDIS_TIMEOUT_MS, gateway_drain_delay_ms=DRAIN_MS
        ),
        **env,
    }
    base = f"http://{cfg.gateway_host}:{port}"
    out = None if log is None else Path(log)
    with process_group([sys.executable, "-m", "gateway"], env=environ, log=out) as proc:
        wait_ready(proc, http_ready(f"{base}/readyz"), READY_TIMEOUT_S, "gateway")
        yield base


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
