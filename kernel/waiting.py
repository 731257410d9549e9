"""Wait for a condition by polling it, with a deadline: never a fixed sleep. One helper in two
forms, a blocking one for threads and scripts and an awaitable one for event loops; both answer
whether the condition held in time, so the caller decides what a timeout means."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

__all__ = ["wait_until", "wait_until_async"]


def wait_until(check: Callable[[], object], timeout_s: float, interval: float = 0.1) -> bool:
    """Poll ``check`` until it is truthy (True) or ``timeout_s`` passes (False); it is called
    at least once, and a check that raises means "not yet"."""
    deadline = time.monotonic() + timeout_s
    while not _holds(check):
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


async def wait_until_async(
    check: Callable[[], object | Awaitable[object]], timeout_s: float, interval: float = 0.05
) -> bool:
    """``wait_until`` on the running loop: ``check`` may be a plain or an async callable."""
    deadline = time.monotonic() + timeout_s
    while not await _holds_async(check):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(interval)
    return True


def _holds(check: Callable[[], object]) -> bool:
    try:
        return bool(check())
    except Exception:  # noqa: BLE001 - a probe that raises means "not yet"
        return False


async def _holds_async(check: Callable[[], object | Awaitable[object]]) -> bool:
    try:
        got = check()
        return bool(await got if inspect.isawaitable(got) else got)
    except Exception:  # noqa: BLE001 - a probe that raises means "not yet"
        return False
