"""The fault tests' view of the Redis Cluster's nodes: which primary holds an item's shards, its
replica, its PID; a replica's copy of the shards' holds (what a promotion would keep); and the
ports the nodes announce to clients (to route every client through a proxy)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import redis
from redis.crc import key_slot

from flashsale.stack.processes import Managed, wait_until
from flashsale.stack.redis_cluster import RedisCluster
from kernel.settings import Settings
from shard_router import shard_keys

PROMOTION_TIMEOUT_S = 30.0
GOSSIP_TIMEOUT_S = 30.0


def node(address: str) -> redis.Redis:
    host, port = address.rsplit(":", 1)
    return redis.Redis(host=host, port=int(port), socket_timeout=2, decode_responses=True)


def command(address: str, *args: str) -> Any:
    """One command on one node, not through the cluster client (which would route it)."""
    return node(address).execute_command(*args)  # type: ignore[no-untyped-call]


def role(address: str) -> str:
    try:
        return str(node(address).info("replication")["role"])
    except (redis.RedisError, OSError):
        return "down"


@dataclass(frozen=True, slots=True)
class Primary:
    address: str
    replicas: tuple[str, ...]
    shards: tuple[int, ...]  # the item's shards it holds

    def pid(self, cfg: Settings) -> int:
        return pid_of(cfg, self.address)


def pid_of(cfg: Settings, address: str) -> int:
    pid = Managed(f"redis-{address.rsplit(':', 1)[1]}", cfg.state_dir).pid()
    assert pid is not None, f"redis {address} is not running"
    return pid


Owner = tuple[str, tuple[str, ...]]  # a primary and its replicas


def _slot_owners(cfg: Settings) -> list[tuple[int, int, Owner]]:
    """(first slot, last slot, owner) from a live node's CLUSTER SLOTS."""
    for address in cfg.redis_nodes:
        with contextlib.suppress(redis.RedisError, OSError):
            ranges = command(address, "CLUSTER SLOTS")
            return [
                (int(r[0]), int(r[1]), (_at(r[2]), tuple(_at(n) for n in r[3:]))) for r in ranges
            ]
    raise AssertionError("no Redis node answers CLUSTER SLOTS")


def _at(entry: list[Any]) -> str:
    return f"{entry[0]}:{entry[1]}"


def busiest_primary(cfg: Settings, item_id: int, shards: int) -> Primary:
    """The primary holding most of the item's shards: its loss hits the most buyers."""
    owners = _slot_owners(cfg)
    held: dict[Owner, list[int]] = {}
    for k in range(shards):
        slot = key_slot(shard_keys(item_id, k).stock.encode())
        owner = next(o for lo, hi, o in owners if lo <= slot <= hi)
        held.setdefault(owner, []).append(k)
    (primary, replicas), ks = max(held.items(), key=lambda kv: len(kv[1]))
    assert replicas, f"primary {primary} has no replica"
    return Primary(primary, replicas, tuple(ks))


def holds_on(address: str, item_id: int, shards: tuple[int, ...]) -> set[str]:
    """The orderIds holding a unit on ``shards``, as the node ``address`` has them (a replica
    answers reads after READONLY)."""
    pipe = node(address).pipeline(transaction=False)
    pipe.execute_command("READONLY")  # type: ignore[no-untyped-call]
    for k in shards:
        pipe.hkeys(shard_keys(item_id, k).orders)
    _, *hashes = pipe.execute()
    return {str(order_id) for keys in hashes for order_id in keys}


def promoted(replicas: tuple[str, ...]) -> str | None:
    """The one of ``replicas`` that is a primary now, if any."""
    return next((a for a in replicas if role(a) == "master"), None)


def wait_promoted(replicas: tuple[str, ...]) -> tuple[str, float]:
    """Which of the replicas took over, and how many seconds that took."""
    started = time.monotonic()
    assert wait_until(lambda: promoted(replicas) is not None, PROMOTION_TIMEOUT_S, 0.05), (
        f"none of {replicas} was promoted in {PROMOTION_TIMEOUT_S:.0f}s"
    )
    winner = promoted(replicas)
    assert winner is not None
    return winner, time.monotonic() - started


def heal(cfg: Settings) -> None:
    """Start any node that is not running and wait until the cluster is ok with its replicas in
    sync (a killed primary comes back as its successor's replica)."""
    RedisCluster(cfg).up()


def _announced(address: str) -> set[str]:
    """The client addresses of every node, as ``address`` knows them (redis-py parses CLUSTER
    NODES into a dict keyed by them)."""
    return {str(key).split("@")[0] for key in command(address, "CLUSTER NODES")}


def announce(cfg: Settings, ports: Mapping[str, int]) -> None:
    """Each node (``address`` → port) tells clients to reach it on that port; 0 is its own.
    Waits until every node's view of the cluster says so (gossip takes a moment)."""
    for address, port in ports.items():
        node(address).config_set("cluster-announce-port", port)
    host = {a: a.rsplit(":", 1)[0] for a in ports}
    wanted = {f"{host[a]}:{p}" if p else a for a, p in ports.items()}
    ok = wait_until(
        lambda: all(_announced(a) == wanted for a in ports), GOSSIP_TIMEOUT_S, interval=0.2
    )
    assert ok, f"the cluster did not learn the announced addresses {sorted(wanted)}"


@contextlib.contextmanager
def announced(cfg: Settings, ports: Mapping[str, int]) -> Iterator[None]:
    """``announce`` for the block; the nodes' own ports again after it, cluster healthy."""
    try:
        announce(cfg, ports)
        yield
    finally:
        announce(cfg, dict.fromkeys(ports, 0))
        RedisCluster(cfg).up()
