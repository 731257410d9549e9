"""The purchase route's path, in one place: the front matches it, the sold-out flags index it."""

from __future__ import annotations

PURCHASE_PREFIX = "/api/flash-sales/items/"
PURCHASE_SUFFIX = "/purchase"


def purchase_path(item_id: int) -> str:
    return f"{PURCHASE_PREFIX}{item_id}{PURCHASE_SUFFIX}"
