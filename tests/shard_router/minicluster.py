"""A small Redis Cluster of the test's own: 2 primaries with a replica each, on free ports in a
temporary directory, so a test may pause or starve its nodes without touching the shared stack.

Replicas never fail over (``cluster-replica-no-failover``) and the node timeout is long, so a
node paused for a test stays what it was: the test decides the topology, not the clock.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from flashsale.stack.processes import spawn_group, stop_group, wait_until
from rig.ports import free_port

_HOST = "127.0.0.1"
# A test run killed before its teardown (a timeout, Ctrl-C twice) takes its nodes with it.
_DIE_WITH_US = ("setpriv", "--pdeathsig", "KILL") if shutil.which("setpriv") else ()


@dataclass
class MiniCluster:
    primaries: list[str]
    replicas: list[str]  # replicas[i] replicates primaries[i]
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _clients: dict[str, redis.Redis] = field(default_factory=dict)

    @property
    def nodes(self) -> tuple[str, ...]:
        return (*self.primaries, *self.replicas)

    def client(self, address: str) -> redis.Redis:
        """A plain client of one node (kept, and closed with the cluster)."""
        client = self._clients.get(address)
        if client is None:
            host, port = address.rsplit(":", 1)
            client = self._clients[address] = redis.Redis(
                host=host, port=int(port), socket_timeout=5
            )
        return client

    def command(self, address: str, *args: Any) -> Any:
        """One command on one node (redis-py's execute_command is untyped)."""
        return self.client(address).execute_command(*args)  # type: ignore[no-untyped-call]

    def replica_of(self, primary: str) -> str:
        return self.replicas[self.primaries.index(primary)]

    def other_primary(self, primary: str) -> str:
        return next(p for p in self.primaries if p != primary)

    def pause(self, address: str) -> None:
        """SIGSTOP one of this cluster's own nodes (``resume`` it, or the cluster's end will)."""
        os.kill(self._procs[address].pid, signal.SIGSTOP)

    def resume(self, address: str) -> None:
        os.kill(self._procs[address].pid, signal.SIGCONT)

    @contextlib.contextmanager
    def paused(self, address: str) -> Iterator[None]:
        """The node paused for the block (resumed even if it fails)."""
        self.pause(address)
        try:
            yield
        finally:
            self.resume(address)

    def wait_calls(self, address: str) -> int:
        """How many WAIT commands the node has run."""
        stats = self.client(address).info("commandstats")
        return int(stats.get("cmdstat_wait", {}).get("calls", 0))


@contextlib.contextmanager
def mini_cluster(directory: Path) -> Iterator[MiniCluster]:
    taken: set[int] = set()
    ports = [free_port(taken, bus=True) for _ in range(4)]
    addresses = [f"{_HOST}:{p}" for p in ports]
    cluster = MiniCluster(addresses[:2], addresses[2:])
    try:
        for address, port in zip(addresses, ports, strict=True):
            data = directory / str(port)
            data.mkdir(parents=True)
            cluster._procs[address] = spawn_group(
                [
                    *_DIE_WITH_US,
                    "redis-server",
                    "--bind",
                    _HOST,
                    "--port",
                    str(port),
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                    "--cluster-replica-no-failover",
                    "yes",
                    "--dir",
                    str(data),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--repl-diskless-sync-delay",
                    "0",  # a replica's first sync now, not 5 s later
                ],
                log=data / "redis.log",
            )
        _form(cluster)
        yield cluster
    finally:
        for client in cluster._clients.values():
            client.close()
        for proc in cluster._procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)  # a node left paused still stops
            stop_group(proc, grace_s=5)


def _form(cluster: MiniCluster) -> None:
    assert wait_until(lambda: all(cluster.client(a).ping() for a in cluster.nodes), 10)
    first, second = cluster.primaries
    cluster.command(first, "CLUSTER", "ADDSLOTSRANGE", 0, 8191)
    cluster.command(second, "CLUSTER", "ADDSLOTSRANGE", 8192, 16383)

    def known() -> bool:
        views = [cluster.command(a, "CLUSTER", "NODES") for a in cluster.nodes]
        if all(len(v.splitlines()) == 4 for v in views):
            return True
        for address in cluster.nodes[1:]:  # (again: a handshake can be dropped)
            host, port = address.rsplit(":", 1)
            cluster.command(first, "CLUSTER", "MEET", host, int(port))
        return False

    assert wait_until(known, 20, interval=0.5), "the mini cluster's nodes never met"
    for primary, replica in zip(cluster.primaries, cluster.replicas, strict=True):
        node_id = cluster.command(primary, "CLUSTER", "MYID").decode()
        cluster.command(replica, "CLUSTER", "REPLICATE", node_id)

    def ready() -> bool:
        states = [cluster.command(a, "CLUSTER", "INFO") for a in cluster.nodes]
        linked = [cluster.client(r).info("replication") for r in cluster.replicas]
        # Every node sees both slot ranges. (It lists the replicas under them only seconds
        # later; the router needs the primaries, and WAIT the replication links.)
        views = [cluster.command(a, "CLUSTER", "SLOTS") for a in cluster.nodes]
        return (
            all(b"cluster_state:ok" in s for s in states)
            and all(r.get("master_link_status") == "up" for r in linked)
            and all(len(v) == 2 for v in views)
        )

    assert wait_until(ready, 30, interval=0.2), "the mini cluster never became healthy"
