"""A Redis Cluster of Debian's redis-server on loopback: 3 primaries with 1 replica each.

Formed once with ``redis-cli --cluster create``; later starts reuse each node's nodes.conf, so
the same cluster comes back. Healthy means ``cluster_state:ok`` on every node and every primary's
replica linked (``master_link_status:up``).
"""

from __future__ import annotations

import shutil

from flashsale.stack.processes import Managed, StackError, run, wait_until
from kernel.settings import Settings


def _fields(address: str, *command: str) -> dict[str, str]:
    """Run a redis-cli command that answers ``key:value`` lines and parse them."""
    host, port = address.rsplit(":", 1)
    out = run(["redis-cli", "-h", host, "-p", port, *command], check=False, timeout=5).stdout
    pairs = (line.split(":", 1) for line in out.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def cluster_info(address: str) -> dict[str, str]:
    return _fields(address, "cluster", "info")


def replication_info(address: str) -> dict[str, str]:
    return _fields(address, "info", "replication")


class RedisCluster:
    def __init__(self, cfg: Settings) -> None:
        self.cfg = cfg
        self.nodes = list(cfg.redis_nodes)
        self.replicas = cfg.redis_replicas_per_primary
        if len(self.nodes) < 3 * (1 + self.replicas):
            raise StackError(
                f"the local Redis Cluster needs {3 * (1 + self.replicas)} nodes "
                f"(3 primaries, {self.replicas} replicas each)"
            )

    def _node(self, address: str) -> Managed:
        return Managed(f"redis-{address.rsplit(':', 1)[1]}", self.cfg.state_dir)

    def processes(self) -> list[Managed]:
        return [self._node(address) for address in self.nodes]

    def up(self) -> None:
        if shutil.which("redis-server") is None:
            raise StackError("redis-server is missing (scripts/bootstrap installs it)")
        for address in self.nodes:
            node = self._node(address)
            if node.pid() is not None:
                continue
            host, port = address.rsplit(":", 1)
            data = self.cfg.state_dir / "redis" / port
            data.mkdir(parents=True, exist_ok=True)
            node.start(
                [
                    "redis-server",
                    "--bind",
                    host,
                    "--port",
                    port,
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    # How fast a dead primary's replica takes over, against how long a paused
                    # primary may be silent without being failed over: see redis_node_timeout_ms.
                    "--cluster-node-timeout",
                    str(self.cfg.redis_node_timeout_ms),
                    "--cluster-replica-validity-factor",
                    str(self.cfg.redis_replica_validity_factor),
                    # A failed primary stops only its own slots: with full coverage required
                    # (the default) every node answers CLUSTERDOWN until the failover ends, and
                    # buyers on every shard get 503s (measured: from 1.4 s after the SIGKILL).
                    "--cluster-require-full-coverage",
                    "no",
                    "--dir",
                    str(data),
                    "--appendonly",
                    "yes",
                    "--save",
                    "",
                    "--daemonize",
                    "no",
                    "--maxmemory",
                    "1gb",
                    "--maxmemory-policy",
                    "noeviction",
                    "--pidfile",
                    "",
                ],
                marker=f"{host}:{port}",
            )
        if not wait_until(lambda: all(_ping(a) for a in self.nodes), 20):
            raise StackError(f"redis nodes did not answer PING; see {self.cfg.state_dir}/logs")
        if cluster_info(self.nodes[0]).get("cluster_known_nodes") == "1":
            run(
                [
                    "redis-cli",
                    "--cluster",
                    "create",
                    *self.nodes,
                    "--cluster-replicas",
                    str(self.replicas),
                    "--cluster-yes",
                ]
            )
        if not wait_until(self.healthy, 60, interval=0.25):
            raise StackError("Redis Cluster did not reach cluster_state:ok with replicas in sync")

    def primaries(self) -> list[str]:
        return [a for a in self.nodes if replication_info(a).get("role") == "master"]

    def healthy(self) -> bool:
        if not all(cluster_info(a).get("cluster_state") == "ok" for a in self.nodes):
            return False
        replicas = [replication_info(a) for a in self.nodes]
        linked = [r for r in replicas if r.get("role") == "slave"]
        wanted = len(self.nodes) * self.replicas // (1 + self.replicas)
        return len(linked) >= wanted and all(r.get("master_link_status") == "up" for r in linked)

    def down(self) -> int:
        return sum(self._node(a).stop() for a in self.nodes)

    def status(self) -> str:
        running = [a for a in self.nodes if self._node(a).pid() is not None]
        state = cluster_info(running[0]).get("cluster_state", "?") if running else "-"
        return f"{len(running)}/{len(self.nodes)} nodes up, cluster_state:{state}"


def _ping(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    return (
        run(["redis-cli", "-h", host, "-p", port, "ping"], check=False, timeout=5).stdout.strip()
        == "PONG"
    )
