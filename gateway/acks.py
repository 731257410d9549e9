"""Outbox acknowledgements, batched: entries whose event Kafka acknowledged are dropped with one
HDEL per outbox hash per event-loop tick, in the background. A failed drop is harmless: the
relay re-sends the entry and the writer deduplicates by orderId."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

# Drops these order ids from the outbox at this key: a future of the auto-pipeline's batch.
Drop = Callable[[K, list[str]], asyncio.Future[Any]]


class BatchedAcks(Generic[K]):
    """Collects order ids per outbox key during a tick, then drops each key's ids at once."""

    def __init__(self, what: str, drop: Drop[K]) -> None:
        self._what = what
        self._drop = drop
        self._pending: dict[K, list[str]] = defaultdict(list)
        self._scheduled = False

    def ack(self, key: K, order_id: str) -> None:
        self._pending[key].append(order_id)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        # No task per key: the auto-pipeline's future is watched by a callback.
        self._scheduled = False
        pending, self._pending = self._pending, defaultdict(list)
        for key, order_ids in pending.items():
            self._drop(key, order_ids).add_done_callback(self._log_failure)

    def _log_failure(self, done: asyncio.Future[Any]) -> None:
        if not done.cancelled() and (exc := done.exception()) is not None:
            # Harmless: the relay re-sends the entry and the writer deduplicates by orderId.
            log.warning("%s failed: %s", self._what, exc)
