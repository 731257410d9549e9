"""What the domain needs from Redis, declared here so that the domain never imports the Redis
side: shard_router's ShardRouter and VoucherStore satisfy these protocols structurally, and the
process packages hand them in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

HoldRecords = list[tuple[str, int]]  # (orderId, the buyer or customer holding its unit)
BuyerEntries = list[tuple[int, str]]  # (userId, orderId): the buyers' dedup entries


class ClusterReadiness(Protocol):
    """Is the cluster fit to open a sale on: replicas in sync, every script on every primary."""

    async def replicas_in_sync(self) -> dict[str, bool]: ...

    async def load_scripts(self) -> None: ...

    async def scripts_loaded_everywhere(self) -> bool: ...


class UnitReleaser(Protocol):
    async def release(
        self, item_id: int, shards: int, unit_shard: int, user_id: int, order_id: str
    ) -> bool:
        """Give an ended order's unit back (once); whether it went back now."""
        ...


class ShardStock(Protocol):
    """One stock shard's counter, as warm-up reads it."""

    @property
    def shard(self) -> int: ...

    @property
    def stock(self) -> int: ...  # units left; 0 when the shard is not loaded

    @property
    def holds(self) -> int: ...  # hold records, read with the stock


class ShardLoader(Protocol):
    """An item's stock shards as warm-up reads and loads them."""

    async def holds(self, item_id: int, shard: int) -> Mapping[str, int]: ...

    async def shard_states(self, item_id: int, shards: int) -> Sequence[ShardStock]: ...

    async def load_shard(
        self, item_id: int, shard: int, units: int, holds: HoldRecords, buyers: BuyerEntries
    ) -> None:
        """lua/load.lua: keep every hold and buyer entry the shard has, add those of ``holds``
        and ``buyers`` it lacks, and set its units left so that units left + holds = ``units``
        + len(``holds``) (never below 0 units left)."""
        ...


class ArmableShards(ClusterReadiness, ShardLoader, Protocol):
    """What arming a sale needs: the readiness checks, then each item's shards."""


class UseReleaser(Protocol):
    async def release(self, code: str, order_id: str, *, ended: bool = True) -> bool:
        """Give an ended flash voucher use back (once); whether it went back now."""
        ...


class VoucherStock(Protocol):
    """A flash voucher's counter, as warm-up reads it."""

    @property
    def remaining(self) -> int | None: ...  # None: not loaded

    @property
    def holds(self) -> int: ...  # hold records, read with the uses left


class VoucherLoader(Protocol):
    """A flash voucher as warm-up reads and loads it."""

    @property
    def router(self) -> ClusterReadiness: ...

    async def holds(self, code: str) -> Mapping[str, int]: ...

    async def state(self, code: str) -> VoucherStock: ...

    async def load(self, code: str, remaining: int, holds: HoldRecords, ended: HoldRecords) -> None:
        """lua/load.lua, as load_shard: every hold kept, those of ``holds`` added, uses left +
        holds = ``remaining`` + len(``holds``); the customers' counts recounted from the holds;
        ``ended`` added to the orderIds never taken again."""
        ...
