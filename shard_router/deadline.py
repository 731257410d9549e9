"""A deadline for one cold-path redis-py command, which holds even if redis-py never returns."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.exceptions import RedisError

from kernel.errors import ShardUnavailable


async def with_deadline(call: Any, timeout: float | None = None) -> Any:
    """Await ``call`` for at most ``timeout`` seconds (2 s by default); ShardUnavailable when it
    takes longer or Redis answers with an error."""
    task = asyncio.ensure_future(call)
    done, _ = await asyncio.wait({task}, timeout=timeout or 2.0)
    if not done:
        # Left running: retrieve its outcome when it comes, so asyncio logs no lost exception.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        raise ShardUnavailable("cluster", "deadline exceeded")
    try:
        return task.result()
    except (RedisError, OSError) as exc:
        raise ShardUnavailable("cluster", str(exc)) from exc
