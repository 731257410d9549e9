"""Stock operations on an item's shards: reserve (with borrowing), release, load, inspect."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisError

from kernel.errors import ShardUnavailable
from kernel.settings import Settings
from shard_router import scripts
from shard_router.autopipeline import AutoPipeline
from shard_router.breaker import Breaker
from shard_router.keys import borrow_order, home_shard, shard_keys


class Outcome(enum.Enum):
    RESERVED = "RESERVED"  # a unit was taken now
    REPLAY = "REPLAY"  # this orderId already held the buyer's unit
    ALREADY = "ALREADY"  # the buyer holds another active order
    SOLD_OUT = "SOLD_OUT"  # every shard of the item is empty


@dataclass(frozen=True, slots=True)
class Reservation:
    outcome: Outcome
    order_id: str  # the new order, or the buyer's existing one for ALREADY
    unit_shard: int = -1
    units_left_on_shard: int = -1


@dataclass(frozen=True, slots=True)
class ShardState:
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
    return RedisCluster(
        startup_nodes=nodes,
        decode_responses=False,
        socket_timeout=max(timeout * 4, 1.0),
        socket_connect_timeout=max(timeout * 4, 1.0),
    )


class ShardRouter:
    def __init__(self, cfg: Settings, client: RedisCluster | None = None) -> None:
        self.client = client or make_client(cfg)
        self.breaker = Breaker(cfg.shard_breaker_failures, cfg.shard_breaker_cooldown_ms / 1000)
        self.pipeline = AutoPipeline(self.client, self.breaker, cfg.redis_timeout_ms / 1000)

    async def start(self) -> None:
        await self.client.initialize()
        await self.load_scripts()

    async def close(self) -> None:
        await self.pipeline.close()
        await self.client.aclose()

    async def load_scripts(self) -> None:
        """SCRIPT LOAD every script on every primary (EVALSHA then rarely meets NOSCRIPT)."""
        for script in scripts.ALL:
            await self.client.script_load(script.source)

    async def scripts_loaded_everywhere(self) -> bool:
        shas = [s.sha for s in scripts.ALL]
        for node in self.client.get_primaries():
            found = await self.client.execute_command("SCRIPT EXISTS", *shas, target_nodes=node)
            flags = found if isinstance(found, list) else [found]
            if not all(flags):
                return False
        return True

    async def replicas_in_sync(self) -> dict[str, bool]:
        """Per primary: does it have at least one replica with its link up?"""
        in_sync: dict[str, bool] = {}
        for node in self.client.get_primaries():
            info = await self.client.info("replication", target_nodes=node)
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

    async def reserve(
        self,
        item_id: int,
        shards: int,
        user_id: int,
        order_id: str,
        payload_for: Callable[[int], bytes],
    ) -> Reservation:
        """Take one unit for the buyer: home shard first, then borrow from the others.

        ``payload_for(shard)`` is the order event as written to the outbox of the shard the unit
        comes from (the event names that shard).
        """
        home = home_shard(user_id, shards)
        keys = shard_keys(item_id, home)
        code, value = await self.pipeline.call(
            scripts.RESERVE, list(keys), [user_id, order_id, payload_for(home)]
        )
        text = value.decode() if isinstance(value, bytes) else str(value)
        if code == 0:
            return Reservation(Outcome.RESERVED, order_id, home, int(text))
        if code == 1:
            return Reservation(Outcome.REPLAY, order_id, home)
        if code == 2:
            return Reservation(Outcome.ALREADY, text)
        for donor in borrow_order(home, shards):
            reservation = await self._borrow(
                item_id, home, donor, user_id, order_id, payload_for(donor)
            )
            if reservation is not None:
                return reservation
        return Reservation(Outcome.SOLD_OUT, order_id)

    async def _borrow(
        self, item_id: int, home: int, donor: int, user_id: int, order_id: str, payload: bytes
    ) -> Reservation | None:
        donor_keys = shard_keys(item_id, donor)
        code, value = await self.pipeline.call(
            scripts.BORROW,
            [donor_keys.stock, donor_keys.orders, donor_keys.outbox],
            [user_id, order_id, payload],
        )
        if code == 3:
            return None
        left = int(value) if code == 0 else -1
        claim_code, existing = await self.pipeline.call(
            scripts.CLAIM, [shard_keys(item_id, home).buyers], [user_id, order_id]
        )
        if claim_code == 2:
            # A double click won the home shard meanwhile: hand the borrowed unit back.
            await self._release_unit(item_id, donor, order_id)
            return Reservation(Outcome.ALREADY, existing.decode())
        outcome = Outcome.RESERVED if code == 0 and claim_code == 0 else Outcome.REPLAY
        return Reservation(outcome, order_id, donor, left)

    async def _release_unit(self, item_id: int, unit_shard: int, order_id: str) -> bool:
        keys = shard_keys(item_id, unit_shard)
        released = await self.pipeline.call(
            scripts.RELEASE, [keys.stock, keys.orders, keys.outbox], [order_id]
        )
        return bool(released)

    async def release(
        self, item_id: int, shards: int, unit_shard: int, user_id: int, order_id: str
    ) -> bool:
        """Give an order's unit back (once) and forget the buyer's dedup entry.

        Unit first: a crash in between leaves the buyer unable to buy again (harmless), never a
        unit that nobody can buy. Returns whether the unit went back now.
        """
        released = await self._release_unit(item_id, unit_shard, order_id)
        await self.pipeline.call(
            scripts.UNCLAIM,
            [shard_keys(item_id, home_shard(user_id, shards)).buyers],
            [user_id, order_id],
        )
        return released

    async def ping(self) -> None:
        await self._with_deadline(self.client.ping(), timeout=1.0)

    async def buyer_order(self, item_id: int, shards: int, user_id: int) -> str | None:
        """The order the buyer holds for this item according to their home shard, if any."""
        keys = shard_keys(item_id, home_shard(user_id, shards))
        value = await self._with_deadline(self.client.hget(keys.buyers, str(user_id)))
        return value.decode() if value else None

    def ack_outbox(
        self, item_id: int, unit_shard: int, order_ids: list[str]
    ) -> asyncio.Future[Any]:
        """Kafka acknowledged these orders: drop them from the shard's outbox (batched with
        this tick's calls; the future settles with the batch)."""
        key = shard_keys(item_id, unit_shard).outbox
        return self.pipeline.command(key, "HDEL", key, *order_ids)

    async def units_left(self, item_id: int, shards: int) -> int:
        """Units left over every shard of the item (one pipelined GET per shard)."""
        pipe = self.client.pipeline()
        for k in range(shards):
            pipe.execute_command("GET", shard_keys(item_id, k).stock)
        return sum(int(v or 0) for v in await self._with_deadline(pipe.execute()))

    async def outboxes_in_use(self, shards: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The non-empty outboxes among ``shards`` (``(item_id, shard)`` each): one HLEN per
        shard, all sent in the same tick, so a scan costs a round trip per node, not per item."""
        keys = [shard_keys(item_id, k).outbox for item_id, k in shards]
        lengths = await asyncio.gather(*self.pipeline.commands([(k, ["HLEN", k]) for k in keys]))
        return [place for place, length in zip(shards, lengths, strict=True) if length]

    async def outbox(self, item_id: int, shard: int) -> dict[str, bytes]:
        raw = await self._with_deadline(self.client.hgetall(shard_keys(item_id, shard).outbox))
        return {k.decode(): v for k, v in raw.items()}

    async def holds(self, item_id: int, shard: int) -> dict[str, int]:
        raw = await self._with_deadline(self.client.hgetall(shard_keys(item_id, shard).orders))
        return {k.decode(): int(v) for k, v in raw.items()}

    async def load_shard(
        self,
        item_id: int,
        shard: int,
        units: int,
        holds: list[tuple[str, int]],
        buyers: list[tuple[int, str]],
    ) -> None:
        args: list[Any] = [units, len(holds)]
        for order_id, user_id in holds:
            args += [order_id, user_id]
        args.append(len(buyers))
        for user_id, order_id in buyers:
            args += [user_id, order_id]
        keys = shard_keys(item_id, shard)
        await self._with_deadline(
            self.client.evalsha(scripts.LOAD_SHARD.sha, 4, *keys, *args), timeout=10
        )

    async def shard_states(self, item_id: int, shards: int) -> list[ShardState]:
        states = []
        for k in range(shards):
            keys = shard_keys(item_id, k)
            pipe = self.client.pipeline()
            for command, key in (
                ("GET", keys.stock),
                ("HLEN", keys.orders),
                ("HLEN", keys.buyers),
                ("HLEN", keys.outbox),
            ):
                pipe.execute_command(command, key)
            stock, holds, buyers, outbox = await self._with_deadline(pipe.execute())
            states.append(
                ShardState(
                    k, self.pipeline.node_of(keys.stock), int(stock or 0), holds, buyers, outbox
                )
            )
        return states

    async def _with_deadline(self, call: Any, timeout: float | None = None) -> Any:
        """Await a one-off command with a deadline that holds even if redis-py never returns."""
        task = asyncio.ensure_future(call)
        done, _ = await asyncio.wait({task}, timeout=timeout or 2.0)
        if not done:
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            raise ShardUnavailable("cluster", "deadline exceeded")
        try:
            return task.result()
        except (RedisError, OSError) as exc:
            raise ShardUnavailable("cluster", str(exc)) from exc
