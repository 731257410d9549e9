"""Arming (loading a sale's stock or a flash voucher's uses into Redis), as the admin API
answers its failures."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from domain.errors import NotReady
from gateway.errors import Conflict, Unavailable
from shard_router import ShardUnavailable


@contextlib.contextmanager
def arm_errors() -> Iterator[None]:
    """Not ready (replicas, scripts) → 409 NOT_READY_TO_ARM, an item on sale now → 409
    SALE_LIVE, each with the reason; Redis unreachable → 503."""
    try:
        yield
    except NotReady as exc:
        raise Conflict(exc.code, detail=str(exc)) from None
    except ShardUnavailable:
        raise Unavailable() from None
