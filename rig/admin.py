"""The admin API calls a test or a load run needs: create and arm a sale, create a flash voucher.
Plain httpx, so the same code serves the tests, the locustfile (under gevent),
``loadtest.scenarios.spike`` and the benchmark's sales (``loadtest.bench``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from kernel.settings import Settings

ADMIN_TIMEOUT_S = 60.0  # arming loads every shard into Redis: seconds for a large item


@dataclass(frozen=True, slots=True)
class NewItem:
    product_id: str
    quantity: int
    shards: int
    price: int = 9900


@dataclass(frozen=True, slots=True)
class SaleItem:
    sale_id: int
    item_id: int
    units: int
    shards: int
    opens_at: float  # epoch seconds


class AdminError(RuntimeError):
    pass


def _client(base_url: str, cfg: Settings) -> httpx.Client:
    headers = {"Authorization": f"Bearer {cfg.admin_token}"}
    return httpx.Client(base_url=base_url, headers=headers, timeout=ADMIN_TIMEOUT_S)


def _expect(response: httpx.Response, status: int, what: str) -> Any:
    """The answer's JSON, or AdminError when it is not ``status``."""
    if response.status_code != status:
        raise AdminError(f"{what}: {response.status_code} {response.text}")
    return response.json()


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat()


def new_sale(
    base_url: str,
    cfg: Settings,
    items: Sequence[NewItem],
    *,
    opens_at: float,
    hours: float = 2.0,
    payment_window_s: int = 600,
    name: str = "loadtest",
    waiting_room: bool = False,
) -> dict[str, Any]:
    """Create a sale of ``items`` opening at ``opens_at`` and arm it (Redis warm-up); the
    created sale as the API answered it (``saleId``, ``items`` with ``itemId`` and ``shards``)."""
    body = {
        "name": name,
        "startsAt": _iso(opens_at),
        "endsAt": _iso(opens_at + hours * 3600),
        "paymentWindowSeconds": payment_window_s,
        "items": [
            {
                "productId": i.product_id,
                "quantity": i.quantity,
                "price": i.price,
                "shards": i.shards,
            }
            for i in items
        ],
    }
    if waiting_room:
        body["waitingRoom"] = {}  # the gateway's default admission rate
    with _client(base_url, cfg) as http:
        sale: dict[str, Any] = _expect(http.post("/admin/sales", json=body), 201, "create sale")
        sale_id = sale["saleId"]
        _expect(http.post(f"/admin/sales/{sale_id}/arm"), 200, f"arm sale {sale_id}")
    return sale


def create_sale(
    base_url: str,
    cfg: Settings,
    *,
    units: int,
    shards: int,
    opens_at: float,
    hours: float = 2.0,
    payment_window_s: int = 600,
    name: str = "loadtest",
    waiting_room: bool = False,
) -> SaleItem:
    """Create a sale of one item opening at ``opens_at`` and arm it (Redis warm-up)."""
    item = NewItem(f"{name}-sku", units, shards)
    sale = new_sale(
        base_url,
        cfg,
        [item],
        opens_at=opens_at,
        hours=hours,
        payment_window_s=payment_window_s,
        name=name,
        waiting_room=waiting_room,
    )
    made = sale["items"][0]
    return SaleItem(sale["saleId"], made["itemId"], units, made["shards"], opens_at)


def create_flash_voucher(
    base_url: str,
    cfg: Settings,
    *,
    code: str,
    total_limit: int,
    discount: int = 100_000,
    hours: float = 2.0,
) -> str:
    """Create a flash voucher (one use per customer, no minimum order), armed on creation."""
    now = dt.datetime.now(dt.UTC).timestamp()
    body = {
        "code": code,
        "discountAmount": discount,
        "minOrderAmount": 0,
        "totalLimit": total_limit,
        "perCustomerLimit": 1,
        "startsAt": _iso(now - 5),
        "endsAt": _iso(now + hours * 3600),
        "isFlash": True,
    }
    with _client(base_url, cfg) as http:
        created = _expect(http.post("/admin/vouchers", json=body), 201, "create voucher")
        if created.get("armed") is False:
            _expect(http.post(f"/admin/vouchers/{code}/arm"), 200, f"arm voucher {code}")
    return code
