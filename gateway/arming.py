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
    """Not ready (replicas, scripts, units in flight) → 409 NOT_READY_TO_ARM with the reason;
    Redis unreachable → 503."""
    try:
        yield
    except NotReady as exc:
        raise Conflict(NotReady.code, detail=str(exc)) from None
    except ShardUnavailable:
        raise Unavailable() from None
