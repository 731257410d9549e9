"""Redis faults from RELIABILITY.md against the real cluster: a paused primary, a lost script
cache, a primary without its replica, a killed primary (whose shard sells again only once the
promoted node has a replica to confirm its writes)."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
import uuid

import pytest

from domain.arm import check_cluster_ready
from domain.errors import NotReady
from flashsale import stack
from flashsale.stack.redis_cluster import RedisCluster, replication_info
from kernel.settings import Settings
from shard_router import Outcome, ShardRouter, ShardUnavailable

pytestmark = [pytest.mark.integration, pytest.mark.faults]
_items = itertools.count(uuid.uuid4().int % 10**9 * 1000 + 7 * 10**12)


def _pid_of(cfg: Settings, address: str) -> int:
    port = address.rsplit(":", 1)[1]
    return int((cfg.state_dir / "pids" / f"redis-{port}.pid").read_text().split()[0])


async def test_a_paused_primary_costs_its_shard_a_fast_503_and_others_keep_selling(
    router: ShardRouter, live_stack: Settings
) -> None:
    item = next(_items)
    for k in range(6):
        await router.load_shard(item, k, 100, [], [])
    nodes = {k: router.pipeline.node_of(f"{{item:{item}:{k}}}:stock") for k in range(6)}
    paused_node = nodes[0]
    healthy = [k for k, n in nodes.items() if n != paused_node]
    assert healthy, "six shards always span more than one primary"
    pid = _pid_of(live_stack, paused_node)
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        paused = await asyncio.gather(
            *(
                router.reserve(item, 6, 6 * u, str(uuid.uuid4()), lambda s: b"e")
                for u in range(1, 30)
            ),
            return_exceptions=True,
        )
        elapsed = time.monotonic() - started
        fine = await router.reserve(item, 6, healthy[0] + 6, str(uuid.uuid4()), lambda s: b"e")
    finally:
        os.kill(pid, signal.SIGCONT)
    # Every buyer homed on the paused shard got an answer within the deadline, not a hang.
    assert all(isinstance(p, ShardUnavailable) for p in paused)
    assert elapsed < live_stack.redis_timeout_ms / 1000 + 1.0
    assert fine.outcome is Outcome.RESERVED
    # Once the node answers again, the breaker lets a probe through and the shard sells.
    deadline = time.monotonic() + 10
    while True:
        try:
            res = await router.reserve(item, 6, 6 * 1000, str(uuid.uuid4()), lambda s: b"e")
            break
        except ShardUnavailable:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
    assert res.outcome is Outcome.RESERVED


async def test_a_flushed_script_cache_is_reloaded(router: ShardRouter) -> None:
    item = next(_items)
    await router.load_shard(item, 0, 5, [], [])
    await router.client.script_flush()
    res = await router.reserve(item, 1, 3, str(uuid.uuid4()), lambda s: b"e")
    assert res.outcome is Outcome.RESERVED
    await router.load_scripts()


async def test_arming_refuses_while_a_primary_has_no_replica(
    router: ShardRouter, live_stack: Settings
) -> None:
    await check_cluster_ready(router)  # a healthy cluster may open a sale
    cluster = RedisCluster(live_stack)
    # Every replica of one primary: a primary with no replica left could confirm no 202.
    primary = next(a for a in live_stack.redis_nodes if replication_info(a).get("role") == "master")
    host, port = primary.rsplit(":", 1)
    replicas = [
        a
        for a in live_stack.redis_nodes
        if replication_info(a).get("master_host") == host
        and replication_info(a).get("master_port") == port
    ]
    assert replicas
    for replica in replicas:
        os.kill(_pid_of(live_stack, replica), signal.SIGKILL)
    try:
        deadline = time.monotonic() + 10
        with pytest.raises(NotReady):
            while time.monotonic() < deadline:
                await check_cluster_ready(router)
                await asyncio.sleep(0.1)
    finally:
        await asyncio.to_thread(stack.up, live_stack, quiet=True)
    assert cluster.healthy()
    await check_cluster_ready(router)


async def test_a_killed_primary_fails_over_and_its_shard_sells_again(
    router: ShardRouter, live_stack: Settings
) -> None:
    item = next(_items)
    for k in range(6):
        await router.load_shard(item, k, 1000, [], [])
    victim = router.pipeline.node_of(f"{{item:{item}:0}}:stock")
    others = [
        k for k in range(1, 6) if router.pipeline.node_of(f"{{item:{item}:{k}}}:stock") != victim
    ]
    os.kill(_pid_of(live_stack, victim), signal.SIGKILL)
    try:
        # The other primaries keep selling while the victim's replica is promoted.
        fine = await router.reserve(item, 6, others[0] + 6, str(uuid.uuid4()), lambda s: b"e")
        assert fine.outcome is Outcome.RESERVED
        # The victim's shard answers 503 (fast) until the failover, then sells again: the
        # promoted replica keeps the victim's other replica, which confirms its writes (WAIT).
        # A new buyer each try: a try the replica did not confirm still holds its unit, so the
        # same buyer's next try would rightly meet that order.
        deadline = time.monotonic() + 30
        for buyer in itertools.count(6 * 1000, 6):
            try:
                res = await router.reserve(item, 6, buyer, str(uuid.uuid4()), lambda s: b"e")
                break
            except ShardUnavailable:
                assert time.monotonic() < deadline, "the shard never sold again"
                await asyncio.sleep(0.2)
        assert res.outcome is Outcome.RESERVED
        assert router.pipeline.node_of(f"{{item:{item}:0}}:stock") != victim
    finally:
        await asyncio.to_thread(stack.up, live_stack, quiet=True)  # the victim rejoins
