"""The admin API calls a load run needs: create and arm a one-item sale, create a flash voucher.
Plain httpx, so the same code serves the locustfile (under gevent) and
``loadtest.scenarios.spike``."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import httpx

from kernel.settings import Settings

ADMIN_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class SaleItem:
    sale_id: int
    item_id: int
    units: int
    shards: int
    opens_at: float  # epoch seconds


class AdminError(RuntimeError):
    pass


def _headers(cfg: Settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {cfg.admin_token}"}


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat()


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
) -> SaleItem:
    """Create a sale of one item opening at ``opens_at`` and arm it (Redis warm-up)."""
    body = {
        "name": name,
        "startsAt": _iso(opens_at),
        "endsAt": _iso(opens_at + hours * 3600),
        "paymentWindowSeconds": payment_window_s,
        "items": [{"productId": f"{name}-sku", "quantity": units, "price": 9900, "shards": shards}],
    }
    with httpx.Client(base_url=base_url, headers=_headers(cfg), timeout=ADMIN_TIMEOUT_S) as http:
        created = http.post("/admin/sales", json=body)
        if created.status_code != 201:
            raise AdminError(f"create sale: {created.status_code} {created.text}")
        sale = created.json()
        armed = http.post(f"/admin/sales/{sale['saleId']}/arm")
        if armed.status_code != 200:
            raise AdminError(f"arm sale {sale['saleId']}: {armed.status_code} {armed.text}")
    item = sale["items"][0]
    return SaleItem(sale["saleId"], item["itemId"], units, item["shards"], opens_at)


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
    with httpx.Client(base_url=base_url, headers=_headers(cfg), timeout=ADMIN_TIMEOUT_S) as http:
        created = http.post("/admin/vouchers", json=body)
        if created.status_code != 201:
            raise AdminError(f"create voucher: {created.status_code} {created.text}")
        if created.json().get("armed") is False:
            armed = http.post(f"/admin/vouchers/{code}/arm")
            if armed.status_code != 200:
                raise AdminError(f"arm voucher {code}: {armed.status_code} {armed.text}")
    return code
