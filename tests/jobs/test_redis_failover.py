"""The failover watch against a throwaway Redis Cluster of its own (3 primaries + 3 replicas,
cluster-node-timeout 2000 ms): a SIGKILLed primary's replica is promoted well before the
cluster's own detection would, and a primary paused like a long GC is left alone."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import pytest

from flashsale.stack.redis_cluster import RedisCluster, replication_info
from jobs.redis_failover import FailoverWatch
from kernel.settings import Settings
from rig.cluster import node_pid, replica_of, throwaway_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(cfg: Settings) -> Iterator[Settings]:
    with throwaway_cluster(cfg, node_timeout_ms=2000, validity_factor=10) as c:
        yield c


def _promoted_within(replica: str, seconds: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if replication_info(replica).get("role") == "master":
            return time.monotonic() - started
        time.sleep(0.02)
    return None


async def test_a_killed_primary_is_failed_over_in_well_under_the_node_timeout(
    cluster: Settings,
) -> None:
    primary = RedisCluster(cluster).primaries()[0]
    replica = replica_of(cluster, primary)
    watch = FailoverWatch(cluster)
    stop = asyncio.Event()
    task = asyncio.create_task(watch.run(stop))
    try:
        await asyncio.sleep(0.3)  # a few rounds with everything up: nothing to do
        assert watch.promoted == []
        os.kill(node_pid(cluster, primary), signal.SIGKILL)
        took = await asyncio.to_thread(_promoted_within, replica, 1.5)
    finally:
        stop.set()
        await task
    # The cluster alone needs node-timeout (2 s) plus its election delay: 2.5 s or more.
    assert took is not None, f"{replica} was not promoted within 1.5 s of the kill"
    assert watch.promoted == [replica]
    await asyncio.to_thread(RedisCluster(cluster).up)  # the victim rejoins, as a replica


async def test_a_primary_paused_for_1_5_s_is_not_failed_over(cluster: Settings) -> None:
    primary = RedisCluster(cluster).primaries()[0]
    replica = replica_of(cluster, primary)
    pid = node_pid(cluster, primary)
    watch = FailoverWatch(cluster)
    stop = asyncio.Event()
    task = asyncio.create_task(watch.run(stop))
    try:
        await asyncio.sleep(0.3)
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(1.5)  # the fault: a pause, its port still accepting connections
        finally:
            os.kill(pid, signal.SIGCONT)
        await asyncio.sleep(2.0)  # a decision taken during the pause would show by now
    finally:
        stop.set()
        await task
    assert watch.promoted == []
    assert replication_info(replica).get("role") == "slave"
    assert replication_info(primary).get("role") == "master"
