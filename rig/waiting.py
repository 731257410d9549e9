"""Waiting by polling with a deadline (``kernel.waiting``, which the stack's code uses too), and
the form a test wants: one that fails the test when the time runs out."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from kernel.waiting import wait_until, wait_until_async

__all__ = ["until", "wait_until", "wait_until_async"]


async def until(
    check: Callable[[], object | Awaitable[object]],
    timeout_s: float = 30,
    what: str = "condition",
    interval: float = 0.05,
) -> None:
    """``wait_until_async``, failing (AssertionError) past ``timeout_s``."""
    if not await wait_until_async(check, timeout_s, interval):
        raise AssertionError(f"{what} not met within {timeout_s:g}s")
