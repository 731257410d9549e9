"""Bounded, jittered exponential backoff for the writer's idempotent steps.

Only errors the step's predicate calls retriable (or WriterErrors marked so) are retried. Each
step gives up after ``attempts`` tries or ``budget_s`` seconds, whichever comes first, and raises
RetriesExhausted.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import asyncpg
from redis.exceptions import RedisError

from shard_router import ShardUnavailable
from writer import metrics
from writer.errors import RetriesExhausted, WriterError

log = logging.getLogger(__name__)

T = TypeVar("T")

Retriable = Callable[[Exception], bool]

# PostgreSQL restarting or unreachable, a lost connection, a deadlock or serialisation failure,
# a deadline: the transaction rolled back (or never began), so running it again is safe.
_DB_TRANSIENT = (
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.TransactionRollbackError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.InterfaceError,
    OSError,
    TimeoutError,
)
_REDIS_TRANSIENT = (ShardUnavailable, RedisError, OSError, TimeoutError)


def _unencodable(exc: Exception) -> bool:
    # asyncpg's client-side DataError: an InterfaceError and a ValueError at once.
    return isinstance(exc, asyncpg.InterfaceError) and isinstance(exc, ValueError)


def db_retriable(exc: Exception) -> bool:
    return isinstance(exc, _DB_TRANSIENT) and not _unencodable(exc)


def db_rejected(exc: Exception) -> bool:
    """PostgreSQL (SQLSTATE classes 22 and 23) or asyncpg refused the data itself: the same
    orders fail every time. Anything else (a missing table, say) is no order's fault."""
    refused = (asyncpg.exceptions.DataError, asyncpg.exceptions.IntegrityConstraintViolationError)
    return isinstance(exc, refused) or _unencodable(exc)


def redis_retriable(exc: Exception) -> bool:
    return isinstance(exc, _REDIS_TRANSIENT)


def never(exc: Exception) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Backoff:
    attempts: int = 30
    budget_s: float = 60.0
    first_s: float = 0.05
    cap_s: float = 5.0

    def delay(self, attempt: int) -> float:
        """Exponential, capped, with half of it random ("equal jitter")."""
        ceiling = min(self.cap_s, self.first_s * 2.0 ** (attempt - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


async def retrying(
    step: str,
    call: Callable[[], Awaitable[T]],
    retriable: Retriable,
    policy: Backoff,
) -> T:
    deadline = time.monotonic() + policy.budget_s
    attempt = 0
    while True:
        attempt += 1
        try:
            return await call()
        except Exception as exc:
            if not (exc.retriable if isinstance(exc, WriterError) else retriable(exc)):
                raise
            delay = policy.delay(attempt)
            if attempt >= policy.attempts or time.monotonic() + delay > deadline:
                raise RetriesExhausted(step, attempt, exc) from exc
            metrics.RETRIES.labels(step).inc()
            log.warning("%s failed (attempt %d), retrying in %.2fs: %r", step, attempt, delay, exc)
            await asyncio.sleep(delay)
