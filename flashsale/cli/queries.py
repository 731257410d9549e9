"""What the command line reads from PostgreSQL beyond the domain's functions: a sale with its
items, and which items and vouchers are on sale now (the gateway's rule, gateway/catalog.py:
armed, not paused, inside the window)."""

from __future__ import annotations

from typing import Any

SALE = """
select id, name, starts_at, ends_at, payment_window_seconds, armed_at,
       armed_at is not null and starts_at <= now() and now() < ends_at as on_sale
from flash_sale where id = $1
"""

SALE_ITEMS = """
select id, product_id, price, quantity, sold, shards, paused
from flash_sale_item where sale_id = $1 order by id
"""

ITEM = """
select i.sale_id, i.quantity, i.sold, i.shards, i.paused,
       s.armed_at is not null and not i.paused and s.starts_at <= now() and now() < s.ends_at
         as on_sale,
       s.ends_at
from flash_sale_item i join flash_sale s on s.id = i.sale_id where i.id = $1
"""

_ITEMS_ON_SALE = """
select i.id from flash_sale_item i join flash_sale s on s.id = i.sale_id
where i.id = any($1::bigint[]) and s.armed_at is not null and not i.paused
  and s.starts_at <= now() and now() < s.ends_at
"""

_VOUCHERS_LIVE = """
select code from voucher
where code = any($1::text[]) and is_flash and starts_at <= now() and now() < ends_at
"""


async def items_on_sale(pool: Any, item_ids: list[int]) -> set[int]:
    return {r["id"] for r in await pool.fetch(_ITEMS_ON_SALE, item_ids)}


async def live_flash_vouchers(pool: Any, codes: list[str]) -> set[str]:
    """Flash vouchers inside their window: their uses are being taken in Redis now."""
    return {r["code"] for r in await pool.fetch(_VOUCHERS_LIVE, codes)}
