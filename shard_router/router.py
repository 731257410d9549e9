"""Stock operations on an item's shards: reserve (with borrowing), release, load, inspect."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import msgspec
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

from kernel.settings import Settings
from kernel.sharding import home_shard
from shard_router import scripts
from shard_router.autopipeline import AutoPipeline
from shard_router.breaker import Breaker
from shard_router.deadline import with_deadline
from shard_router.keys import shard_keys
from shard_router.places import Places
from shard_router.reserving import (
    Outcome,
    Reservation,
    Reserver,
    ShardNotLoaded,
    pending_order,
)

__all__ = ["Outcome", "Reservation", "ShardNotLoaded", "ShardRouter", "ShardState", "make_client"]
_CLUSTER_REDIRECTS = 3  # the cluster client's own MOVED/ASK hops per command (redis-py: 16)


# One shard's counters as Redis holds them, and also the shape the admin API (gateway/bodies.py)
# and the CLI's --json (flashsale/cli/views.py) answer them in. (No docstring: it would become
# the OpenAPI schema's description.)
class ShardState(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    shard: int
    node: str
    stock: int
    holds: int
    buyers: int
    outbox: int


def make_client(cfg: Settings) -> RedisCluster:
    nodes = [
        ClusterNode(host, int(port)) for host, port in (a.rsplit(":", 1) for a in cfg.redis_nodes)
    ]
    timeout = cfg.redis_timeout_ms / 1000
    client = RedisCluster(
        startup_nodes=nodes,
        decode_responses=False,
        socket_timeout=max(timeout * 4, 1.0),
        socket_connect_timeout=max(timeout * 4, 1.0),
        # The cold path's commands run under with_deadline; a bounded client keeps what it
        # does past that deadline (retries, redirections) bounded too.
        retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.2), retries=1),
    )
    client.RedisClusterRequestTTL = _CLUSTER_REDIRECTS
    return client


class ShardRouter:
    def __init__(self, cfg: Settings, client: RedisCluster | None = None) -> None:
        self.client = client or make_client(cfg)
        self.breaker = Breaker(cfg.shard_breaker_failures, cfg.shard_breaker_cooldown_ms / 1000)
        self.pipeline = AutoPipeline(
            self.client,
            self.breaker,
            cfg.redis_timeout_ms / 1000,
            wait_replicas=cfg.redis_wait_replicas,
            wait_timeout_ms=cfg.redis_wait_timeout_ms,
        )
        self.places = Places(self.client, self.pipeline, cfg.redis_wait_replicas)
        self._reserver = Reserver(self.pipeline, cfg.borrow_lease_ms)

    async def start(self) -> None:
        await self.client.initialize()
        await self.load_scripts()

    async def close(self) -> None:
        await self.pipeline.close()
        await self.client.aclose()

    def _cold(self, call: Any, timeout: float | None = None) -> Coroutine[Any, Any, Any]:
        """A redis-py call of the cold path, under its deadline, failing as ShardUnavailable."""
        return with_deadline(call, timeout, client=self.client)

    async def load_scripts(self) -> None:
        """SCRIPT LOAD every script on every primary (EVALSHA then rarely meets NOSCRIPT)."""
        for script in scripts.ALL:
            await self._cold(self.client.script_load(script.source))

    async def scripts_loaded_everywhere(self) -> bool:
        shas = [s.sha for s in scripts.ALL]
        for node in self.client.get_primaries():
            found = await self._cold(
                self.client.execute_command("SCRIPT EXISTS", *shas, target_nodes=node)
            )
            flags = found if isinstance(found, list) else [found]
            if not all(flags):
                return False
        return True

    async def replicas_in_sync(self) -> dict[str, bool]:
        """Per primary: does it have at least one replica with its link up?"""
        in_sync: dict[str, bool] = {}
        for node in self.client.get_primaries():
            info = await self._cold(self.client.info("replication", target_nodes=node))
            connected = int(info.get("connected_slaves", 0))
            lagging = [
                info[k]
                for k in info
                if k.startswith("slave")
                and isinstance(info[k], dict)
                and info[k].get("state") != "online"
            ]
            in_sync[node.name] = connected > 0 and not lagging
        return in_sync

    def reserve(
        self,
        item_id: int,
        shards: int,
        user_id: int,
        order_id: str,
        payload_for: Callable[[int], bytes],
    ) -> Coroutine[Any, Any, Reservation]:
        """Take one unit for the buyer: home shard first, then borrow from the others
        (shard_router/reserving.py). ShardUnavailable when Redis cannot confirm, ShardNotLoaded
        (one) when a shard's stock is unknown: both a 503, never SOLD_OUT.

        ``payload_for(shard)`` is the order event as written to the outbox of the shard the unit
        comes from (the event names that shard). (Reserver's coroutine itself: no frame of its
        own on the hot path.)
        """
        return self._reserver.reserve(item_id, shards, user_id, order_id, payload_for)

    async def release(
        self, item_id: int, shards: int, unit_shard: int, user_id: int, order_id: str
    ) -> bool:
        """Give an order's unit back (once) and forget the buyer's dedup entry.

        Unit first: a crash in between leaves the buyer unable to buy again (harmless), never a
        unit that nobody can buy. Returns whether the unit went back now.
        """
        released = await self._reserver.release_unit(item_id, unit_shard, order_id)
        await self.pipeline.call(
            scripts.UNCLAIM,
            [shard_keys(item_id, home_shard(user_id, shards)).buyers],
            [user_id, order_id],
        )
        return released

    async def ping(self) -> None:
        await self._cold(self.client.ping(), timeout=1.0)

    async def buyer_order(self, item_id: int, shards: int, user_id: int) -> str | None:
        """The order the buyer holds for this item according to their home shard, if any."""
        keys = shard_keys(item_id, home_shard(user_id, shards))
        value = await self._cold(self.client.hget(keys.buyers, str(user_id)))
        return pending_order(value) if value else None

    def ack_outbox(
        self, item_id: int, unit_shard: int, order_ids: list[str]
    ) -> asyncio.Future[Any]:
        """Kafka acknowledged these orders: drop them from the shard's outbox (batched with
        this tick's calls; the future settles with the batch)."""
        return self.places.ack_outbox(shard_keys(item_id, unit_shard).outbox, order_ids)

    async def units_left(self, item_id: int, shards: int) -> int:
        """Units left over every shard of the item (one pipelined GET per shard). A shard whose
        stock key is missing raises ShardNotLoaded: unknown, not 0, so no sold-out flag is kept
        up on its account."""
        pipe = self.client.pipeline()
        for k in range(shards):
            pipe.execute_command("GET", shard_keys(item_id, k).stock)
        values = await self._cold(pipe.execute())
        for k, value in enumerate(values):
            if value is None:
                stock = shard_keys(item_id, k).stock
                raise ShardNotLoaded(self.pipeline.node_of(stock), f"{stock} is missing")
        return sum(int(v) for v in values)

    async def outboxes_in_use(self, shards: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The non-empty outboxes among ``shards`` (``(item_id, shard)`` each)."""
        return await self.places.outboxes_in_use(shards, lambda place: shard_keys(*place).outbox)

    async def outbox(self, item_id: int, shard: int) -> dict[str, bytes]:
        return await self.places.outbox(shard_keys(item_id, shard).outbox)

    async def holds(self, item_id: int, shard: int) -> dict[str, int]:
        return await self.places.holds(shard_keys(item_id, shard).orders)

    async def load_shard(
        self,
        item_id: int,
        shard: int,
        units: int,
        holds: list[tuple[str, int]],
        buyers: list[tuple[int, str]],
    ) -> None:
        """Rebuild the shard: its units left, its hold records ``(orderId, userId)`` and the
        dedup entries ``(userId, orderId)`` of the buyers at home here."""
        keys = shard_keys(item_id, shard)
        await self.places.load(keys.stock, units, [(keys.orders, holds), (keys.buyers, buyers)])

    async def shard_states(self, item_id: int, shards: int) -> list[ShardState]:
        states = []
        for k in range(shards):
            keys = shard_keys(item_id, k)
            counts = await self.places.counts(keys.stock, [keys.orders, keys.buyers, keys.outbox])
            holds, buyers, outbox = counts.lengths
            states.append(ShardState(k, counts.node, counts.left or 0, holds, buyers, outbox))
        return states
