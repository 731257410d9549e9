"""Background jobs that run a step every interval until told to stop, surviving a failed step;
and the signals that tell a long-running job to stop (between rounds, never inside one)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
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


@contextlib.contextmanager
def stopped_by_signals(stop: asyncio.Event) -> Iterator[None]:
    """For the block, SIGTERM and SIGINT set ``stop`` instead of ending the process mid-round
    (the running loop's handlers; off the main thread, where none can be set, nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
