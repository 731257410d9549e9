"""A loopback port that nothing listens on, for a server a test or a benchmark starts."""

from __future__ import annotations

import random
import socket

__all__ = ["CLUSTER_PORTS", "REDIS_BUS_OFFSET", "free_port"]

REDIS_BUS_OFFSET = 10_000  # a Redis Cluster node's bus listens this far above its port
# Cluster nodes: their buses land in 31000-41000, clear of the nodes and the kernel's ephemerals.
CLUSTER_PORTS = range(21000, 31000)


def free_port(
    taken: set[int] | None = None, ports: range | None = None, *, bus: bool = False
) -> int:
    """A loopback port nothing listens on and not in ``taken`` (to which it is added): the
    kernel's pick, or the first free one of ``ports``. ``bus``: a Redis Cluster node's, whose bus
    port must be free too (from ``CLUSTER_PORTS`` unless given, starting at a random one so that
    two runs at once rarely try the same)."""
    taken = set() if taken is None else taken
    if ports is None and not bus:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        taken.add(port)
        return port
    candidates: list[int] = list(ports) if ports is not None else []
    if ports is None:
        start = CLUSTER_PORTS.start + random.randrange(len(CLUSTER_PORTS))
        candidates = [*range(start, CLUSTER_PORTS.stop), *range(CLUSTER_PORTS.start, start)]
    for port in candidates:
        if port in taken or not _bindable(port):
            continue
        if bus and not _bindable(port + REDIS_BUS_OFFSET):
            continue
        taken.add(port)
        return port
    raise RuntimeError(f"no free port in {candidates[0]}-{candidates[-1]}")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
