"""Redis's clock as a process reads it (shard_router/redis_clock.py): the offset comes from the
middle of a read's round trip, a slow read is dropped, and against the local cluster (on this
machine's own clock) the offset read is within a read's error of zero."""

from __future__ import annotations

import time

import pytest

from kernel.settings import Settings
from shard_router import ShardRouter
from shard_router.redis_clock import MAX_ROUND_TRIP_S, RedisClock


def test_the_offset_is_taken_from_the_middle_of_the_round_trip() -> None:
    clock = RedisClock()
    assert not clock.known and clock.ahead_s == 0.0
    assert clock.observe(int(1_000_030.05 * 1e6), sent=1_000_000.0, received=1_000_000.1)
    assert clock.known
    assert clock.ahead_s == pytest.approx(30.0, abs=1e-3)
    assert clock.now() == pytest.approx(time.time() + 30.0, abs=0.05)


def test_a_slow_read_is_dropped_and_the_last_good_offset_stays() -> None:
    clock = RedisClock()
    clock.observe(int(1_000_005.0 * 1e6), sent=1_000_000.0, received=1_000_000.0)
    kept = clock.observe(
        int(1_000_090.0 * 1e6), sent=1_000_000.0, received=1_000_000.0 + 2 * MAX_ROUND_TRIP_S
    )
    assert not kept
    assert clock.ahead_s == pytest.approx(5.0, abs=1e-3)


async def test_the_local_clusters_clock_reads_as_this_machines(live_stack: Settings) -> None:
    router = ShardRouter(live_stack)
    await router.start()
    try:
        clock = RedisClock()
        reads = [await clock.read(router.client) for _ in range(5)]
    finally:
        await router.close()
    assert any(reads), "every read of TIME took longer than its round-trip limit"
    assert abs(clock.ahead_s) < MAX_ROUND_TRIP_S / 2, clock.ahead_s
