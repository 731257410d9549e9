"""A throwaway Redis Cluster: 3 primaries + 3 replicas started by the stack's own code (so with
the stack's settings: a failover measured here is the stack's) on ports nothing listens on, in a
temporary state directory, never the stack's; and its nodes' PIDs and replicas, to fault them."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from flashsale.stack.processes import Managed, port_open
from flashsale.stack.redis_cluster import RedisCluster, replication_info
from kernel.settings import Settings
from rig.ports import REDIS_BUS_OFFSET, free_port

__all__ = ["NODES", "node_pid", "replica_of", "throwaway_cluster"]

NODES = 6


@contextmanager
def throwaway_cluster(
    base: Settings,
    *,
    node_timeout_ms: int,
    validity_factor: int,
    ports: Sequence[int] | None = None,
) -> Iterator[Settings]:
    """The cluster for the block; yields ``base`` pointed at it. ``ports``: the six to use
    (refused if one, or its bus port, is taken); free ones if not given."""
    if ports is None:
        taken: set[int] = set()
        ports = [free_port(taken, bus=True) for _ in range(NODES)]
    busy = [
        p
        for p in ports
        if port_open(f"127.0.0.1:{p}") or port_open(f"127.0.0.1:{p + REDIS_BUS_OFFSET}")
    ]
    if busy:
        raise RuntimeError(f"ports {busy} are in use: the cluster needs {NODES} free ones")
    state = Path(tempfile.mkdtemp(prefix="flashsale-cluster-"))
    cfg = dataclasses.replace(
        base,
        state_dir=state,
        redis_nodes=tuple(f"127.0.0.1:{p}" for p in ports),
        redis_replicas_per_primary=1,  # a failover's timing: one replica to promote is enough
        redis_node_timeout_ms=node_timeout_ms,
        redis_replica_validity_factor=validity_factor,
    )
    cluster = RedisCluster(cfg)
    try:
        cluster.up()
        yield cfg
    finally:
        cluster.down()
        shutil.rmtree(state, ignore_errors=True)


def node_pid(cfg: Settings, address: str) -> int:
    """The PID of the cluster's node at ``address`` (to SIGKILL or SIGSTOP it)."""
    pid = Managed(f"redis-{address.rsplit(':', 1)[1]}", cfg.state_dir).pid()
    assert pid is not None, f"{address} is not running"
    return pid


def replica_of(cfg: Settings, primary: str) -> str:
    port = primary.rsplit(":", 1)[1]
    for address in cfg.redis_nodes:
        info = replication_info(address)
        if info.get("role") == "slave" and info.get("master_port") == port:
            return address
    raise RuntimeError(f"{primary} has no replica")
