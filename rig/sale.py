"""A sale driven through real processes: a gateway and a writer started with given settings, a
sale created and armed through the admin API, and (``rig.invariants``) the check after the
writer has drained. The tests' and the load tools' one way to do each.

    with running_writer(env), running_gateway(cfg, port, env=env) as base:
        item_id = one_item_sale(base, cfg, quantity=100, shards=4)["items"][0]["itemId"]
        ...buy...
    checks = check_invariants(cfg, [item_id], accepted)
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import msgspec

from domain.sales import NewSale, create_sale
from flashsale.stack.processes import (
    LIFTED_IP_LIMITS,
    StackError,
    http_ready,
    port_open,
    process_group,
    settings_env,
    wait_ready,
)
from kernel.settings import Settings
from rig.admin import NewItem, new_sale

__all__ = [
    "LIFTED_IP_LIMITS",
    "one_item_sale",
    "running_gateway",
    "running_writer",
    "stored_item",
]

READY_TIMEOUT_S = 30.0


@contextmanager
def running_gateway(
    cfg: Settings,
    port: int,
    *,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    core: int | str | None = None,
) -> Iterator[str]:
    """A gateway (``python -m gateway``) on ``port`` for the block, with ``env``
    (``FLASHSALE_*``) on top of ours, its output appended to ``log`` if given, pinned to
    ``core`` (a ``taskset`` list) if given; yields its base URL once it is ready."""
    base = f"http://{cfg.gateway_host}:{port}"
    if port_open(f"{cfg.gateway_host}:{port}"):
        # Its readiness probe would be answered by whatever holds the port.
        raise StackError(f"cannot start a gateway on port {port}: something listens there")
    environ = {**settings_env(gateway_port=port), **(env or {})}
    argv = [sys.executable, "-m", "gateway"]
    if core is not None:
        argv = ["taskset", "-c", str(core), *argv]
    with process_group(argv, env=environ, log=log) as proc:
        wait_ready(proc, http_ready(f"{base}/readyz"), READY_TIMEOUT_S, "gateway", log)
        yield base


@contextmanager
def running_writer(env: Mapping[str, str] | None = None, log: Path | None = None) -> Iterator[None]:
    """A writer (``python -m writer``, its metrics on a free port) for the block, with ``env``
    (``FLASHSALE_*``) on top of ours."""
    argv = [sys.executable, "-m", "writer", "--metrics-port", "0"]
    with process_group(argv, env=env, log=log):
        yield


def one_item_sale(
    base: str,
    cfg: Settings,
    quantity: int,
    shards: int,
    *,
    window_s: int = 600,
    opens_in_s: float = -5,
    name: str = "test",
) -> dict[str, Any]:
    """A sale of one item (``sku``), created and armed; open ``-opens_in_s`` seconds ago (or
    opening in ``opens_in_s``), for two hours. The API's answer (``saleId``, ``items``)."""
    opens_at = time.time() + opens_in_s
    item = NewItem("sku", quantity, shards, price=990)
    return new_sale(
        base,
        cfg,
        [item],
        opens_at=opens_at,
        hours=2 - opens_in_s / 3600,
        payment_window_s=window_s,
        name=name,
    )


async def stored_item(
    pool: asyncpg.Pool, quantity: int, shards: int, *, name: str, product_id: str = "sku"
) -> int:
    """An item of a sale open for the next hour, stored by the admin API's own insert but not
    armed (nothing in Redis): for a writer fed orders by hand."""
    now = dt.datetime.now(dt.UTC)
    body = {
        "name": name,
        "startsAt": now,
        "endsAt": now + dt.timedelta(hours=1),
        "items": [{"productId": product_id, "quantity": quantity, "price": 100, "shards": shards}],
    }
    _, [item_id] = await create_sale(pool, msgspec.convert(body, NewSale))
    return item_id
