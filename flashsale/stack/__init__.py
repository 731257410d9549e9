"""The local stack: a Redis Cluster, a Kafka cluster, PostgreSQL and Prometheus on loopback, by
PID file."""

from __future__ import annotations

import time

from flashsale.stack.failover_watch import FailoverWatcher
from flashsale.stack.kafka import KafkaCluster
from flashsale.stack.postgres import Postgres
from flashsale.stack.processes import StackError
from flashsale.stack.prometheus import Prometheus
from flashsale.stack.redis_cluster import RedisCluster
from kernel.settings import Settings

__all__ = ["StackError", "down", "named_pids", "pids", "running", "status", "up"]


def _components(
    cfg: Settings,
) -> list[tuple[str, RedisCluster | FailoverWatcher | KafkaCluster | Postgres | Prometheus]]:
    return [
        ("redis", RedisCluster(cfg)),
        ("failover-watch", FailoverWatcher(cfg)),  # promotes a replica when a primary dies
        ("kafka", KafkaCluster(cfg)),
        ("postgres", Postgres(cfg)),
        ("prometheus", Prometheus(cfg)),  # last up, first down: it scrapes the others
    ]


def up(cfg: Settings, *, quiet: bool = False) -> float:
    """Start whatever is not running and wait until each part is healthy; safe to run twice."""
    started = time.monotonic()
    for name, component in _components(cfg):
        t0 = time.monotonic()
        if not quiet:
            print(f"stack: {name} ...", flush=True)
        component.up()
        if not quiet:
            print(
                f"stack: {name} ready in {time.monotonic() - t0:.1f}s ({component.status()})",
                flush=True,
            )
    return time.monotonic() - started


def down(cfg: Settings) -> None:
    """Stop exactly what ``up`` started, in reverse order."""
    for name, component in reversed(_components(cfg)):
        stopped = component.down()
        print(f"stack: {name} {'stopped' if stopped else 'was not running'}")


def running(cfg: Settings) -> list[tuple[str, str, int]]:
    """(part, process, PID) of what ``down`` would stop now, in the order it would."""
    found = []
    for name, component in reversed(_components(cfg)):
        for proc in component.processes():
            pid = proc.pid()
            if pid is not None:
                found.append((name, proc.name, pid))
    return found


def status(cfg: Settings) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, component in _components(cfg):
        found[name] = component.status()
        if isinstance(component, KafkaCluster):
            found.update(component.broker_status())  # a line per broker under the summary
    return found


def pids(cfg: Settings) -> list[int]:
    """The PIDs of the stack's running server processes (not their children)."""
    return list(named_pids(cfg))


def named_pids(cfg: Settings) -> dict[int, str]:
    """The stack's running server processes (not their children): PID → its PID file's name."""
    found = {proc.pid(): proc.name for _, c in _components(cfg) for proc in c.processes()}
    return {pid: name for pid, name in found.items() if pid is not None}
