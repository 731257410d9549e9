"""Six ways to keep one contended item from overselling, each as ``attempt(buyer)`` on state of
its own (``loadtest.bench.techniques`` races clients through them and checks the result).

PostgreSQL techniques use ``bench.oversell_stock`` (schema ``bench``, away from the app's tables),
one fresh row per trial, deliberately WITHOUT ``CHECK (sold <= quantity)``: the constraint would
hide an oversell as an error, and an oversell is what the check after each trial looks for. Redis
techniques use keys under one hash tag per trial on the stack's cluster, deleted afterwards.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
import uuid
from typing import Any, Protocol

import asyncpg
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError

from kernel.events import OrderPlaced, encode
from shard_router.scripts import RESERVE

WON, LOST, GAVE_UP = "won", "lost", "gave_up"
Decision = tuple[str, int]  # (outcome, retries)
LOCK_TTL_MS = 1000
LOCK_WAIT_S = 10.0  # a lock not acquired in this long: the attempt gives up (reported)
# A busy lock: wait up to 1 ms, doubling per retry to 20 ms, jittered.
LOCK_BACKOFF_S = (0.001, 0.02)
UNLOCK = """if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0"""
SCHEMA = """
CREATE SCHEMA IF NOT EXISTS bench;
CREATE TABLE IF NOT EXISTS bench.oversell_stock (
    id        bigserial PRIMARY KEY,
    technique text    NOT NULL,
    quantity  integer NOT NULL,
    sold      integer NOT NULL DEFAULT 0,
    version   integer NOT NULL DEFAULT 0
)"""
PAYLOAD = encode(OrderPlaced("0" * 36, 1, 1, 0, 0, 1_700_000_000_000, 1_700_000_600_000))


async def run_script(
    redis: RedisCluster, sha: str, source: str, keys: list[str], args: list[Any]
) -> Any:
    """EVALSHA, and EVAL (which caches the script on that node) when the node lacks it."""
    try:
        return await redis.evalsha(sha, len(keys), *keys, *args)
    except NoScriptError:
        return await redis.eval(source, len(keys), *keys, *args)


class Guard(Protocol):
    name: str

    async def prepare(self, units: int) -> None: ...

    async def attempt(self, buyer: int) -> Decision: ...

    async def sold(self) -> int:
        """Units sold according to the store itself (not to the clients' count of wins)."""
        ...

    async def cleanup(self) -> None: ...


class PgRow:
    """A fresh row of ``bench.oversell_stock`` per trial."""

    name = "pg"

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.row = 0

    async def prepare(self, units: int) -> None:
        async with self.pool.acquire() as conn:
            await conn.execute(SCHEMA)
            self.row = await conn.fetchval(
                "INSERT INTO bench.oversell_stock (technique, quantity) VALUES ($1, $2)"
                " RETURNING id",
                self.name,
                units,
            )

    async def sold(self) -> int:
        sold: int = await self.pool.fetchval(
            "SELECT sold FROM bench.oversell_stock WHERE id = $1", self.row
        )
        return sold

    async def cleanup(self) -> None:
        await self.pool.execute("DELETE FROM bench.oversell_stock WHERE id = $1", self.row)


class PgConditional(PgRow):
    """One statement: the row lock and the guard in the same UPDATE."""

    name = "pg_conditional"

    async def attempt(self, buyer: int) -> Decision:
        status = await self.pool.execute(
            "UPDATE bench.oversell_stock SET sold = sold + 1 WHERE id = $1 AND sold < quantity",
            self.row,
        )
        return (WON if status == "UPDATE 1" else LOST), 0


class PgForUpdate(PgRow):
    """Pessimistic: lock the row, read, decide in the client, write, commit."""

    name = "pg_for_update"

    async def attempt(self, buyer: int) -> Decision:
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                "SELECT sold, quantity FROM bench.oversell_stock WHERE id = $1 FOR UPDATE",
                self.row,
            )
            if row["sold"] >= row["quantity"]:
                return LOST, 0
            await conn.execute(
                "UPDATE bench.oversell_stock SET sold = $2 WHERE id = $1", self.row, row["sold"] + 1
            )
            return WON, 0


class PgOptimistic(PgRow):
    """Read without a lock, write only if the version is unchanged, retry on 0 rows."""

    name = "pg_optimistic"

    async def attempt(self, buyer: int) -> Decision:
        retries = 0
        while True:
            row = await self.pool.fetchrow(
                "SELECT sold, quantity, version FROM bench.oversell_stock WHERE id = $1", self.row
            )
            if row["sold"] >= row["quantity"]:
                return LOST, retries
            status = await self.pool.execute(
                "UPDATE bench.oversell_stock SET sold = $2, version = version + 1"
                " WHERE id = $1 AND version = $3",
                self.row,
                row["sold"] + 1,
                row["version"],
            )
            if status == "UPDATE 1":
                return WON, retries
            retries += 1


class RedisKeys:
    """Keys under one hash tag of the trial's own."""

    name = "redis"

    def __init__(self, redis: RedisCluster) -> None:
        self.redis = redis
        tag = f"{{bench:oversell:{uuid.uuid4().hex[:12]}}}"
        self.stock, self.buyers, self.orders, self.outbox, self.lock = (
            f"{tag}:{part}" for part in ("stock", "buyers", "orders", "outbox", "lock")
        )
        self.units = 0

    async def prepare(self, units: int) -> None:
        self.units = units
        await self.redis.set(self.stock, units)

    async def sold(self) -> int:
        return self.units - int(await self.redis.get(self.stock) or 0)

    async def cleanup(self) -> None:
        for key in (self.stock, self.buyers, self.orders, self.outbox, self.lock):
            await self.redis.unlink(key)


class RedisDecr(RedisKeys):
    """DECR; a negative result is undone with INCR (the counter dips below 0 meanwhile)."""

    name = "redis_decr"
    lowest = 0

    async def attempt(self, buyer: int) -> Decision:
        left = int(await self.redis.decr(self.stock))
        if left >= 0:
            return WON, 0
        self.lowest = min(self.lowest, left)
        await self.redis.incr(self.stock)
        return LOST, 0


class RedisLua(RedisKeys):
    """The project's ``lua/reserve.lua`` on one shard's keys: dedup, check, take, hold, outbox."""

    name = "redis_lua"

    async def attempt(self, buyer: int) -> Decision:
        keys = [self.stock, self.buyers, self.orders, self.outbox]
        args = [buyer, f"o{buyer}", PAYLOAD]
        code, _ = await run_script(self.redis, RESERVE.sha, RESERVE.source.decode(), keys, args)
        if int(code) == 0:
            return WON, 0
        if int(code) == 3:
            return LOST, 0
        raise RuntimeError(f"reserve returned {code} for a new buyer")

    async def sold(self) -> int:
        return int(await self.redis.hlen(self.orders))


class RedisLockPg(RedisKeys):
    """A Redis lock (SET NX PX, released only by its owner) around a plain PostgreSQL
    read-then-write: the lock alone keeps the write safe."""

    name = "redis_lock_pg"

    def __init__(self, redis: RedisCluster, pool: asyncpg.Pool) -> None:
        super().__init__(redis)
        self.row = PgRow(pool)
        self.pool = pool
        self.unlock_sha = hashlib.sha1(UNLOCK.encode(), usedforsecurity=False).hexdigest()
        self.lost_locks = 0  # releases that found another owner: the TTL ran out mid-update

    async def prepare(self, units: int) -> None:
        await self.row.prepare(units)

    async def sold(self) -> int:
        return await self.row.sold()

    async def cleanup(self) -> None:
        await self.row.cleanup()
        await super().cleanup()

    async def attempt(self, buyer: int) -> Decision:
        owner = f"{buyer}:{uuid.uuid4().hex}"
        retries = 0
        deadline = time.monotonic() + LOCK_WAIT_S
        while not await self.redis.set(self.lock, owner, nx=True, px=LOCK_TTL_MS):
            if time.monotonic() > deadline:
                return GAVE_UP, retries
            first, cap = LOCK_BACKOFF_S
            await asyncio.sleep(random.uniform(0, min(cap, first * 2**retries)))
            retries += 1
        try:
            async with self.pool.acquire() as conn:
                row = await conn.fetchrow(
                    "SELECT sold, quantity FROM bench.oversell_stock WHERE id = $1", self.row.row
                )
                if row["sold"] >= row["quantity"]:
                    return LOST, retries
                await conn.execute(
                    "UPDATE bench.oversell_stock SET sold = $2 WHERE id = $1",
                    self.row.row,
                    row["sold"] + 1,
                )
                return WON, retries
        finally:
            released = await run_script(self.redis, self.unlock_sha, UNLOCK, [self.lock], [owner])
            if int(released) != 1:
                self.lost_locks += 1
