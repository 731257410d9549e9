"""What an item's stock shard and a flash voucher have in common on the cluster. Each is a
*place*: the keys under one hash tag (``{item:<id>:<k>}``, ``{voucher:<code>}``) that one Lua call
touches, with a counter of units (uses) left, hold records (orderId → owner) and an outbox
(orderId → event Kafka has not acknowledged yet). These operations take a place's key names, so
ShardRouter and VoucherStore share them and keep only what differs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.asyncio.cluster import RedisCluster

from shard_router import scripts
from shard_router.autopipeline import AutoPipeline
from shard_router.confirmed import run_confirmed
from shard_router.deadline import with_deadline

Place = TypeVar("Place")
Pairs = Sequence[tuple[str | int, str | int]]  # (field, value) pairs of one hash


@dataclass(frozen=True, slots=True)
class PlaceCounts:
    node: str
    left: int | None  # the counter; None when it does not exist (never loaded, or lost)
    lengths: list[int]  # HLEN of each hash asked for, in order


# A load rewrites a whole place (thousands of holds, maybe) on a connection of its own: it may
# wait longer for its replica than a buyer's batch, and a few seconds of arm are cheap.
_LOAD_WAIT_MS = 2000


class Places:
    def __init__(
        self, client: RedisCluster, pipeline: AutoPipeline, wait_replicas: int = 0
    ) -> None:
        self._client = client
        self._pipeline = pipeline
        self._wait_replicas = wait_replicas

    async def outbox(self, key: str) -> dict[str, bytes]:
        """orderId → event payload."""
        raw = await with_deadline(self._client.hgetall(key), client=self._client)
        return {k.decode(): v for k, v in raw.items()}

    async def holds(self, key: str) -> dict[str, int]:
        """orderId → the buyer (customer) holding the unit (use)."""
        raw = await with_deadline(self._client.hgetall(key), client=self._client)
        return {k.decode(): int(v) for k, v in raw.items()}

    async def outboxes_in_use(
        self, places: list[Place], outbox_key: Callable[[Place], str]
    ) -> list[Place]:
        """The places whose outbox is not empty: one HLEN each, all sent in the same tick, so a
        scan costs a round trip per node, not per place."""
        keys = [outbox_key(place) for place in places]
        lengths = await asyncio.gather(*self._pipeline.commands([(k, ["HLEN", k]) for k in keys]))
        return [place for place, length in zip(places, lengths, strict=True) if length]

    def ack_outbox(self, key: str, order_ids: list[str]) -> asyncio.Future[Any]:
        """Kafka acknowledged (or the writer stored) these events: drop their outbox entries
        (batched with this tick's calls; the future settles with the batch)."""
        return self._pipeline.command(key, "HDEL", key, *order_ids)

    async def counts(self, counter: str, hashes: Sequence[str]) -> PlaceCounts:
        """The counter and the length of each hash, in one pipelined round trip."""
        pipe = self._client.pipeline()
        pipe.execute_command("GET", counter)
        for key in hashes:
            pipe.execute_command("HLEN", key)
        left, *lengths = await with_deadline(pipe.execute(), client=self._client)
        return PlaceCounts(
            self._pipeline.node_of(counter), None if left is None else int(left), lengths
        )

    async def load(
        self,
        counter: str,
        left: int,
        rebuilt: Sequence[tuple[str, Pairs]],
        grown: Sequence[tuple[str, Pairs]] = (),
    ) -> None:
        """lua/load.lua: set the counter, empty and refill the ``rebuilt`` hashes, add to the
        ``grown`` ones, all in one atomic call, confirmed on the replica (a replica promoted
        without the load would answer NOT_LOADED: a 503, never a sold-out shard)."""
        filled = [*rebuilt, *grown]
        args: list[Any] = [left, len(rebuilt)]
        for _, pairs in filled:
            args.append(len(pairs))
            for field, value in pairs:
                args += [field, value]
        keys = [counter, *(key for key, _ in filled)]
        command = ["EVAL", scripts.LOAD.source, len(keys), *keys, *args]
        await with_deadline(
            run_confirmed(self._client, counter, command, self._wait_replicas, _LOAD_WAIT_MS),
            timeout=10,
            client=self._client,
        )
