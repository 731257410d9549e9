"""Background jobs that run a step every interval until told to stop, surviving a failed step."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)


async def run_every(
    interval_s: float, step: Callable[[], Awaitable[Any]], stop: asyncio.Event, what: str
) -> None:
    """Await ``step()`` every ``interval_s`` until ``stop`` is set; a failed round is logged and
    the next one tries again (a background job must outlive a Redis or database hiccup)."""
    while not stop.is_set():
        try:
            await step()
        except Exception as exc:  # noqa: BLE001 - try again next round
            log.warning("%s failed: %s", what, exc)
        try:
            await asyncio.wait_for(stop.wait(), interval_s)
        except TimeoutError:
            pass
