"""Errors of the domain, each mapped by the gateway to a 409 with a stable code.

DomainError
├── NotReady        NOT_READY_TO_ARM  a sale cannot be armed yet (replicas, scripts)
│   └── SaleLive    SALE_LIVE         arming would reload shards buyers are buying from
└── VoucherExists   VOUCHER_EXISTS    the voucher code is taken (domain/vouchers.py)
"""

from __future__ import annotations


class DomainError(Exception):
    """A rule of the domain refused the change; nothing was written."""


class NotReady(DomainError):
    """A sale cannot be armed yet (replicas not in sync, scripts missing)."""

    code = "NOT_READY_TO_ARM"


class SaleLive(NotReady):
    """Arming would reload shards that buyers are buying from: refused until the item is paused.
    Loading merges with Redis, so even a racing buyer keeps their hold; but a unit moved off a
    shard while a buyer takes it there leaves that shard short, and re-arming a sale on sale is
    almost always an operator's mistake."""

    code = "SALE_LIVE"
