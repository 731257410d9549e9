"""Giving units back in Redis once the database has ended their orders, the same for an order's
unit and a flash voucher's use: only after the commit that ended them (so Redis never offers a
unit the database still counts), each release idempotent."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from kernel.errors import ShardUnavailable

log = logging.getLogger(__name__)

E = TypeVar("E")


async def give_back(ended: Iterable[E], release: Callable[[E], Awaitable[bool]]) -> list[E]:
    """``release`` each one; returns those whose unit went back now. A release Redis cannot
    confirm leaves a stale hold: the order has ended, so nothing here will try it again, and
    reconciliation's sweep (jobs/reconcile_loop.py) releases it, live or not, until it goes."""
    released: list[E] = []
    for one in ended:
        try:
            if await release(one):
                released.append(one)
        except ShardUnavailable as exc:
            log.warning("release of %s left to the reconciliation sweep: %s", one, exc)
    return released
