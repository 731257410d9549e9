"""Vouchers as the gateway caches them (gateway/catalog.py).

Ordinary vouchers may number in the millions (one code per customer), so they are read on
demand; the flash vouchers live in the last hour are the live rows, also re-read in the
background (the outbox relay and /metrics walk them).
"""

from __future__ import annotations

import time

import asyncpg

from domain.vouchers import SELECT_VOUCHER, Voucher, voucher_of
from gateway.catalog import Catalog, CatalogQuery

_VOUCHERS: CatalogQuery[str, Voucher] = CatalogQuery(
    one=SELECT_VOUCHER + " where code = $1",
    live=SELECT_VOUCHER + " where is_flash and ends_at > now() - interval '1 hour'",
    row=voucher_of,
    key=lambda voucher: voucher.code,
    is_live=lambda voucher: voucher.is_flash,
)


class VoucherCatalog(Catalog[str, Voucher]):
    def __init__(self, pool: asyncpg.Pool, ttl_s: float) -> None:
        super().__init__(pool, _VOUCHERS, ttl_s, "voucher catalog")

    def live_flash(self) -> list[Voucher]:
        horizon = time.time() - 3600
        return [v for v in self.live() if v.ends_at > horizon]
