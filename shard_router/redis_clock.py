"""Redis's wall clock, as one process reads it: for times that one gateway writes and another
judges (a waiting room's admission expiry), so that both judge by the same clock whatever their
own clocks say. Each read of Redis ``TIME`` sets the offset from this process's clock, from the
middle of the round trip; a read whose round trip took longer than ``MAX_ROUND_TRIP_S`` is
dropped (its error would be up to half of it), and the last good offset stays."""

from __future__ import annotations

import time

from redis.asyncio.cluster import RedisCluster

from shard_router.deadline import with_deadline

MAX_ROUND_TRIP_S = 0.2  # a read's error is at most half its round trip
_TIME = "local t = redis.call('TIME') return t[1] * 1000000 + t[2]"  # any node: no keys


class RedisClock:
    def __init__(self) -> None:
        self.ahead_s = 0.0  # Redis's clock minus this process's (0 until a good read)
        self.known = False

    def now(self) -> float:
        """Seconds since the epoch by Redis's clock (this process's own until the first read)."""
        return time.time() + self.ahead_s

    def observe(self, redis_us: int, sent: float, received: float) -> bool:
        """Take one read (``sent``/``received``: this process's clock); whether it was kept."""
        if received - sent > MAX_ROUND_TRIP_S:
            return False
        self.ahead_s = redis_us / 1e6 - (sent + received) / 2
        self.known = True
        return True

    async def read(self, client: RedisCluster) -> bool:
        """Read Redis ``TIME`` once (ShardUnavailable if it fails); whether it was kept."""
        sent = time.time()
        redis_us = await with_deadline(client.eval(_TIME, 0), client=client)
        return self.observe(int(redis_us), sent, time.time())
